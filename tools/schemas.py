"""Validate Kubernetes objects against real schemas, unknown fields refused.

Core kinds: the `kubernetes-validate` package in strict mode. Custom resources: the openAPIV3Schema of the
matching CRD, made strict the way the API server prunes: an object schema with `properties` and without
`x-kubernetes-preserve-unknown-fields` takes no other keys. The CRDs: the upstream ones upstream.lock.yaml pins
(`make upstream` fetches them), or `--crds` a folder of CRD files or one file of them, such as a cluster's own
(`kubectl get crd -o yaml > crds.yaml`: a List).

    python -m tools.schemas rendered/prod-ib/manifests.yaml [--crds DIR|FILE]

Prints each problem, then one line: how many objects, how many valid, core and custom. Exit 0 all valid, 1 some
invalid, 2 no CRDs to check against or an unreadable manifest.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jsonschema
import yaml

from tools import own_schemas, upstream
from tools.manifests import LOADER, ManifestError, load

K8S_VERSION = "1.37.0"
META_KEYS = {"name", "namespace", "labels", "annotations", "finalizers", "ownerReferences", "generateName"}


def strict(schema: dict) -> dict:
    out = dict(schema)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = strict(out["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [strict(s) for s in out[key]]
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def _crds(doc: object) -> list[dict]:
    """The CRDs in one YAML document: itself, or the items of a List (what `kubectl get crd -o yaml` writes)."""
    if not isinstance(doc, dict):
        return []
    if doc.get("kind") == "CustomResourceDefinition":
        return [doc]
    if str(doc.get("kind", "")).endswith("List"):
        return [crd for item in doc.get("items") or [] for crd in _crds(item)]
    return []


@functools.cache
def crd_schemas(crds: Path) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict schema of every CRD version in `crds`: a folder of CRD files, or one file."""
    out = {}
    for path in sorted(crds.glob("*.yaml")) if crds.is_dir() else [crds]:
        # The CRDs are megabytes of YAML: use libyaml's loader where PyYAML has it.
        for doc in yaml.load_all(path.read_text(), Loader=LOADER):
            for crd in _crds(doc):
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                for v in crd["spec"]["versions"]:
                    if "schema" not in v:  # a version served without one: nothing to check against
                        continue
                    schema = dict(v["schema"]["openAPIV3Schema"])
                    props = dict(schema.get("properties", {}))
                    props["metadata"] = {"type": "object"}  # checked by _metadata_errors
                    props.setdefault("apiVersion", {"type": "string"})
                    props.setdefault("kind", {"type": "string"})
                    schema["properties"] = props
                    out[(f"{group}/{v['name']}", kind)] = strict(schema)
    return out


@functools.cache
def _validator(key: tuple, crds: Path) -> jsonschema.Draft7Validator | None:
    schema = crd_schemas(crds).get(key) or own_schemas.OWN.get(key)
    return jsonschema.Draft7Validator(schema) if schema is not None else None


def _metadata_errors(obj: dict) -> list[str]:
    md = obj.get("metadata") or {}
    errors = [f"metadata.{k}: unknown field" for k in sorted(set(md) - META_KEYS)]
    if not md.get("name"):
        errors.append("metadata.name: required")
    for key in ("labels", "annotations"):
        for k, v in (md.get(key) or {}).items():
            if not isinstance(v, str):
                errors.append(f"metadata.{key}.{k}: must be a string, got {type(v).__name__}")
    return errors


def check(obj: dict, crds: Path | None = None, version: str = K8S_VERSION) -> tuple[str, list[str]]:
    """Which schema judged `obj` (`custom`: a CRD's, `core`: Kubernetes' at `version`) and every problem with it, as
    `path: message` strings. `crds` defaults to the locked upstream CRDs (upstream.Missing without them)."""
    crds = crds or upstream.crds_dir()
    key = (obj.get("apiVersion"), obj.get("kind"))
    validator = _validator(key, crds)
    if validator is not None:
        errors = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in validator.iter_errors(obj)
        ]
        return "custom", errors + _metadata_errors(obj)
    if (
        "/" in (obj.get("apiVersion") or "")
        and "." in obj["apiVersion"].split("/")[0]
        and not obj["apiVersion"].endswith(".k8s.io/v1")
    ):
        return "custom", [f"no upstream CRD for {key[0]} {key[1]} in {crds}: lock it in upstream.lock.yaml"]
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        return "core", [f"{'.'.join(str(p) for p in err.path) or '(root)'}: {err.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return "core", [f"no Kubernetes {version} schema for {key[0]} {key[1]}"]
    return "core", []


def validate(obj: dict, crds: Path | None = None, version: str = K8S_VERSION) -> list[str]:
    """Every problem with `obj`; empty when it validates."""
    return check(obj, crds, version)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.schemas", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="manifest files or folders (.yaml, .yml), - for stdin")
    ap.add_argument(
        "--crds",
        type=Path,
        help="a folder of CRD files or one file of CRDs (kubectl get crd -o yaml); default: the locked upstream ones",
    )
    ap.add_argument(
        "--kubernetes-version",
        default=K8S_VERSION,
        help=f"the core kinds' schema version, the stack's kubernetesVersion (`1.34`, `1.34.0`); default {K8S_VERSION}",
    )
    args = ap.parse_args(argv)
    version = args.kubernetes_version if args.kubernetes_version.count(".") == 2 else f"{args.kubernetes_version}.0"
    if args.crds and not args.crds.exists():
        print(f"{args.crds}: no such file or folder", file=sys.stderr)
        return 2
    try:
        crds = args.crds or upstream.crds_dir()
        objs = load(args.paths)
    except (upstream.Missing, ManifestError) as err:
        print(f"{err}{' (or pass --crds)' if isinstance(err, upstream.Missing) else ''}", file=sys.stderr)
        return 2
    counts = {"core": 0, "custom": 0}
    invalid = 0
    for path, obj in objs:
        judged_by, errors = check(obj, crds, version)
        counts[judged_by] += 1
        invalid += bool(errors)
        md = obj.get("metadata", {})
        for e in errors:
            print(f"{path}: {obj.get('kind')} {md.get('namespace', '')}/{md.get('name')}: {e}")
    where = str(args.paths[0]) if len(args.paths) == 1 else f"{len(args.paths)} paths"
    verdict = "valid" if not invalid else f"checked, {invalid} invalid"
    print(f"{where}: {len(objs)} objects {verdict} ({counts['core']} core, {counts['custom']} custom)")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main())
