"""Validate Kubernetes objects against real schemas, unknown fields refused.

Core kinds: the `kubernetes-validate` package in strict mode. Custom resources: the openAPIV3Schema of the
matching upstream CRD (../shared/upstream/crds/), made strict the way the API server prunes: an object schema
with `properties` and without `x-kubernetes-preserve-unknown-fields` takes no other keys.

    python -m tools.schemas rendered/prod-ib/manifests.yaml [--crds DIR]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jsonschema
import yaml

from tools.manifests import LOADER, load

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT.parent / "shared" / "upstream" / "crds"
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


@functools.cache
def crd_schemas(crds_dir: Path = CRDS) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> strict schema of every CRD version in `crds_dir`."""
    out = {}
    for path in sorted(crds_dir.glob("*.yaml")):
        # The CRDs are megabytes of YAML: use libyaml's loader where PyYAML has it.
        for doc in yaml.load_all(path.read_text(), Loader=LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for v in doc["spec"]["versions"]:
                schema = dict(v["schema"]["openAPIV3Schema"])
                props = dict(schema.get("properties", {}))
                props["metadata"] = {"type": "object"}  # checked by _metadata_errors
                props.setdefault("apiVersion", {"type": "string"})
                props.setdefault("kind", {"type": "string"})
                schema["properties"] = props
                out[(f"{group}/{v['name']}", kind)] = strict(schema)
    return out


@functools.cache
def _validator(key: tuple, crds_dir: Path) -> jsonschema.Draft7Validator | None:
    schema = crd_schemas(crds_dir).get(key)
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


def validate(obj: dict, crds_dir: Path = CRDS) -> list[str]:
    """Every problem with `obj`, as `path: message` strings; empty when it validates."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    validator = _validator(key, crds_dir)
    if validator is not None:
        errors = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in validator.iter_errors(obj)
        ]
        return errors + _metadata_errors(obj)
    if (
        "/" in (obj.get("apiVersion") or "")
        and "." in obj["apiVersion"].split("/")[0]
        and not obj["apiVersion"].endswith(".k8s.io/v1")
    ):
        return [f"no upstream CRD for {key[0]} {key[1]} in {crds_dir}: add it to shared/upstream/crds"]
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{'.'.join(str(p) for p in err.path) or '(root)'}: {err.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no Kubernetes {K8S_VERSION} schema for {key[0]} {key[1]}"]
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.schemas", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--crds", type=Path, default=CRDS)
    args = ap.parse_args(argv)
    bad = 0
    for path, obj in load(args.paths):
        for e in validate(obj, args.crds):
            bad += 1
            md = obj.get("metadata", {})
            print(f"{path}: {obj.get('kind')} {md.get('namespace', '')}/{md.get('name')}: {e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
