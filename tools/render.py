"""Offline renderer: run the real __main__.py under Pulumi's mock runtime and write what `pulumi up` would send.

    python -m tools.render --stack NAME [--out DIR] [--check]

Config comes from stacks/Pulumi.NAME.yaml exactly as the Pulumi CLI hands it to the program (structured values
as JSON text, `secure:` values masked). Writes rendered/NAME/:
  manifests.yaml  every Kubernetes object the program declares, multi-document, deterministic order
  packages.yaml   every third-party install (Helm releases, kustomize overlays) with source, version, values
  SUMMARY.md      the resource tree by component, the fabric profile and each job's contract
Exit codes: 0 written (or up to date with --check), 1 --check found a stale rendered/, 2 unknown stack or bad
config (the message names the stack file and key).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import math
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.impact import ack, preview
from components.impact.model import Impact, impact
from components.model import stack as stack_model
from components.model.profile import Profile
from components.model.profile import profile as make_profile
from tools import inventory, mocks, yamlsafe
from tools.mocks import Registration, Run

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / "stacks"
RENDERED = ROOT / "rendered"
SECRET = "[secret]"

# Apply order a reviewer (and kubectl) expects: cluster scaffolding first, then workloads, then custom resources.
KIND_ORDER = [
    "Namespace",
    "CustomResourceDefinition",
    "PriorityClass",
    "StorageClass",
    "PersistentVolumeClaim",
    "ConfigMap",
    "NicClusterPolicy",
    "IPPool",
    "SriovNetworkPoolConfig",
    "SriovNetworkNodePolicy",
    "SriovIBNetwork",
    "SriovNetwork",
    "NetworkAttachmentDefinition",
    "Queue",
]
PACKAGE_TYPES = {"kubernetes:helm.sh/v3:Release"}


class RenderError(Exception):
    """Unknown stack or bad config: exit 2 with this message. `registered` counts the resources the program
    had registered when it stopped (a bad stack file must leave it at 0)."""

    def __init__(self, message: str, registered: int = 0):
        super().__init__(message)
        self.registered = registered


# ------------------------------------------------------------------------------------------- stack config


def _code(text: str | None) -> str:
    return f"`{text}`" if text else ""


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def stack_names() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS.glob("Pulumi.*.yaml"))


def _mask(value: Any) -> tuple[Any, bool]:
    """Replace every `{secure: ...}` with a placeholder; report whether any was found."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return SECRET, True
        found = False
        out = {}
        for k, v in value.items():
            out[k], f = _mask(v)
            found |= f
        return out, found
    if isinstance(value, list):
        items = [_mask(v) for v in value]
        return [v for v, _ in items], any(f for _, f in items)
    return value, False


def load_stack_config(stack: str) -> tuple[dict[str, str], list[str]]:
    """The config map and secret keys as the Pulumi CLI would pass them to the program."""
    path = STACKS / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise RenderError(f"unknown stack {stack!r}: no {_rel(path)} (stacks: {', '.join(stack_names())})")
    return load_stack_file(path)


def load_stack_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """`load_stack_config` of a stack file anywhere (tools/impact.py reads any two)."""
    try:
        doc = yamlsafe.load(path.read_text()) or {}
    except yamlsafe.Refused as err:
        raise RenderError(f"{_rel(path)}: {err}") from None
    except (yaml.YAMLError, ValueError) as err:  # ValueError: a timestamp such as 2024-13-01
        raise RenderError(f"{_rel(path)}: not valid YAML: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config") or {}, dict):
        raise RenderError(
            f"{_rel(path)}: config: must be a mapping of keys to values (`config:` then `  fastpath:platform: ...`)"
        )
    config, secrets = {}, []
    for key, value in (doc.get("config") or {}).items():
        if not isinstance(key, str):
            raise RenderError(f"{_rel(path)}: config.{key!r}: keys are strings: quote it")
        if ":" not in key:
            key = f"fastpath:{key}"  # the CLI namespaces bare keys with the project name
        value = plain(value, key, _rel(path))
        value, secret = _mask(value)
        if secret:
            secrets.append(key)
        config[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return config, secrets


def profile_of_stack_file(path: Path) -> Profile:
    """The profile a stack file's platform gives its jobs, offline (no Pulumi engine, no cluster): what
    `from_stack` reads from a deployed stack, for a TrainingJob built in another program or a notebook. Raises
    RenderError or ConfigError naming the file and the key."""
    config, _ = load_stack_file(path)
    raw = {k.split(":", 1)[1]: json.loads(v) for k, v in config.items() if k.startswith("fastpath:")}
    return make_profile(stack_model.parse(raw, str(_rel(path))).platform)


def plain(value: Any, where: str, source: Path) -> Any:
    """YAML's extra types as the stack file's author meant them, or a refusal with the key path: a date or time
    (`SNAPSHOT: 2024-06-01`) is the text written; sets, binary, non-string keys and non-finite numbers have no
    JSON form and are refused."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RenderError(f'{source}: {where}.{k!r}: keys are strings here: quote it ("{k}")')
            out[k] = plain(v, f"{where}.{k}", source)
        return out
    if isinstance(value, list):
        return [plain(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        raise RenderError(f"{source}: {where}: a YAML set (!!set or `? item` entries): write a list instead")
    if isinstance(value, bytes):
        raise RenderError(f"{source}: {where}: binary data (!!binary): write the value as text")
    if isinstance(value, float) and not math.isfinite(value):
        raise RenderError(f"{source}: {where}: {value} is not a number a stack can hold: write a finite number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise RenderError(f"{source}: {where}: a {type(value).__name__} value: write a string, number, list or map")


# ------------------------------------------------------------------------------------------- program


def run_program(
    stack: str,
    program: Callable[[], None] | None = None,
    extra_config: dict | None = None,
    references: dict[str, dict] | None = None,
) -> Run:
    """Run __main__.py (or `program`) for `stack` under the mocks (tools/mocks.py). `extra_config` adds or
    replaces config keys (values as in a stack file); `references` gives the outputs of StackReferences by stack
    name. Raises RenderError for an unknown stack, a bad stack file or a program that refuses its config."""
    config, secrets = load_stack_config(stack)
    for key, value in (extra_config or {}).items():
        config[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    try:
        return mocks.run(stack, config, secrets, program=program, references=references)
    except mocks.ProgramError as err:
        raise RenderError(str(err), registered=err.registered) from None


# ------------------------------------------------------------------------------------------- output


def integral(value: Any) -> Any:
    """Mocks hand every number back as a float (8.0 -> 8) and unset inputs as None (dropped)."""
    from components.model.profile import normalize

    return normalize(value, drop_none=True)


def _unsecret(value: Any) -> Any:
    """Inputs the SDK marks secret (a Secret's `data`) come back from the mocks wrapped; unwrap an empty one,
    mask any other."""
    from pulumi.runtime import rpc

    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return value.get("value") if not value.get("value") else SECRET
        return {k: _unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecret(v) for v in value]
    return value


def _object(r: Registration) -> dict:
    obj = _unsecret(integral(r.inputs))
    return {"apiVersion": obj.pop("apiVersion"), "kind": obj.pop("kind"), **obj}


def manifests(run: Run) -> list[dict]:
    objs = []
    for r in run.registrations:
        if not r.custom or not r.type.startswith("kubernetes:") or r.type in PACKAGE_TYPES:
            continue
        objs.append(_object(r))

    def key(o: dict) -> tuple:
        rank = KIND_ORDER.index(o["kind"]) if o["kind"] in KIND_ORDER else len(KIND_ORDER)
        md = o.get("metadata", {})
        return rank, o["kind"], md.get("namespace", ""), md.get("name", ""), o["apiVersion"]

    return sorted(objs, key=key)


def _object_key(obj: dict) -> str:
    md = obj.get("metadata") or {}
    return "/".join(p for p in (obj["kind"], md.get("namespace"), md.get("name")) if p)


def readable(r: Registration) -> str:
    """A dependency as a reviewer names it: `helm/volcano`, `kustomize/training-operator`,
    `NicClusterPolicy/nic-cluster-policy`, `Namespace/gpu-operator`, `Volcano/volcano` (a whole component)."""
    if r.type == "kubernetes:helm.sh/v3:Release":
        return f"helm/{r.inputs.get('name') or r.name}"
    if r.type.startswith("kubernetes:kustomize"):
        return f"kustomize/{r.name}"
    if r.custom and r.type.startswith("kubernetes:") and isinstance(r.inputs.get("metadata"), dict):
        return _object_key(_object(r))
    return f"{short_type(r.type)}/{r.name}"


def waits_for(run: Run, r: Registration) -> list[str]:
    """What `pulumi up` creates before `r`: its own dependencies and those of every component above it."""
    by_urn = {x.urn: x for x in run.registrations}
    deps: list[str] = []
    node: Registration | None = r
    while node is not None:
        deps += node.dependencies
        node = by_urn.get(node.parent)
    return sorted({readable(by_urn[d]) for d in deps if d in by_urn})


def packages(run: Run) -> list[dict]:
    by_urn = {r.urn: r for r in run.registrations}
    out = []
    for r in run.registrations:
        if r.type == "kubernetes:helm.sh/v3:Release":
            i = integral(r.inputs)
            out.append(
                {
                    "kind": "helm",
                    "name": i.get("name", r.name),
                    "chart": i["chart"],
                    "repo": i.get("repositoryOpts", {}).get("repo"),
                    "version": i["version"],
                    "namespace": i.get("namespace"),
                    "waitsFor": waits_for(run, r),
                    "values": i.get("values", {}),
                }
            )
        elif r.type.startswith("kubernetes:kustomize"):
            # Built by the provider at `pulumi up`, never here: its source and what fastpath's kustomization does
            # to it (the component that owns it says both), not the upstream objects; how those are named and kept.
            parent = by_urn.get(r.parent)
            outputs = parent.outputs if parent else {}
            out.append(
                {
                    "kind": "kustomize",
                    "name": r.name,
                    "source": outputs.get("overlay") or r.inputs.get("directory"),
                    "namespace": outputs.get("namespace"),
                    "waitsFor": waits_for(run, r),
                    "kustomization": integral(outputs.get("kustomization")),
                    "objects": _built_objects(r),
                    "resourcePrefix": r.inputs.get("resourcePrefix"),
                    "aliases": r.aliases,
                    "protected": [short_type(t) for t in outputs.get("protects") or [] if _kept(r, t)],
                }
            )
    return sorted(out, key=lambda p: (p["kind"], p["name"]))


def _built_objects(r: Registration) -> str:
    line = "built by the provider at `pulumi up`"
    if r.inputs.get("resourcePrefix") == "" and {"type": "kubernetes:kustomize:Directory"} in r.aliases:
        line += "; names kept from kustomize.Directory v1 by alias"
    return line


def _kept(r: Registration, child_type: str) -> bool:
    """Whether `r`'s transforms, which the engine runs on every object the provider registers under it, make a
    `child_type` object protected and retained on delete (tried on a stand-in: the mocks never run them)."""
    import pulumi

    opts = pulumi.ResourceOptions()
    for transform in r.transforms:
        result = transform(pulumi.ResourceTransformArgs(True, child_type, "stand-in", {}, opts))
        if isinstance(result, pulumi.ResourceTransformResult):
            opts = result.opts
    return bool(opts.protect and opts.retain_on_delete)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_all(docs: list) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=120, explicit_start=True)


def short_type(t: str) -> str:
    return t.rsplit(":", 1)[-1]


def summary(run: Run, objs: list[dict], pkgs: list[dict], sections: list[str]) -> str:
    children: dict[str, list[Registration]] = {}
    for r in run.registrations:
        children.setdefault(r.parent, []).append(r)
    lines = [
        f"# Stack `{run.stack}`",
        "",
        "Generated by `python -m tools.render`; do not edit. A change here is a change to the cluster.",
        "",
        f"{len(objs)} Kubernetes objects, {len(pkgs)} packages, {len(run.registrations)} resources in all.",
        "",
        "## Resources by component",
        "",
    ]

    def walk(urn: str, depth: int) -> None:
        kids = children.get(urn, [])
        components = sorted((k for k in kids if not k.custom), key=lambda k: k.urn)
        counts = Counter(short_type(k.type) for k in kids if k.custom)
        for comp in components:
            sub = Counter(short_type(k.type) for k in children.get(comp.urn, []) if k.custom)
            detail = ", ".join(f"{n} {t}" for t, n in sorted(sub.items()))
            head = f"{'  ' * depth}- **{short_type(comp.type)}** `{comp.name}`"
            lines.append(head + (f": {detail}" if detail else ""))
            walk(comp.urn, depth + 1)
        if depth == 0 and counts:
            lines.append("- (stack) " + ", ".join(f"{n} {t}" for t, n in sorted(counts.items())))

    registered = {r.urn for r in run.registrations}
    for root in sorted({r.parent for r in run.registrations if r.parent not in registered}):
        walk(root, 0)
    lines.append("")
    lines.append("## Packages")
    lines.append("")
    lines.append("| kind | name | source | version | namespace | waits for |")
    lines.append("|---|---|---|---|---|---|")
    for p in pkgs:
        src = (f"{p['repo']} {p['chart']}" if p["repo"] else p["chart"]) if p["kind"] == "helm" else p["source"]
        waits = ", ".join(f"`{w}`" for w in p.get("waitsFor", [])) or "-"
        lines.append(
            f"| {p['kind']} | {p['name']} | {src} | {p.get('version', '')} | {p.get('namespace') or ''} | {waits} |"
        )
    lines.append("")
    for p in pkgs:
        if p["kind"] == "kustomize":
            kept = ", ".join(p["protected"])
            lines.append(
                f"- kustomize `{p['name']}`: objects {p['objects']}"
                + (f"; {kept} protected and retained" if kept else "")
            )
    if any(p["kind"] == "kustomize" for p in pkgs):
        lines.append("")
    for s in sections:
        lines.append(s)
    return "\n".join(lines).rstrip() + "\n"


def profile_section(profile: dict | None) -> str:
    if not profile:
        return ""
    lines = [
        "## Fabric profile",
        "",
        f"- cluster `{profile['cluster']}`, namespaces {', '.join(f'`{n}`' for n in profile['namespaces'])}",
        f"- fabric `{profile['fabric']['kind']}`"
        + (f" via `{profile['fabric']['attachment']}`" if profile["fabric"].get("attachment") else "")
        + f", expected NCCL transport `{profile['transport']}`",
        f"- GPUs: {profile['gpu']['perNode']} x `{profile['gpu']['product']}` per node, "
        f"{profile['nodes']['count']} nodes",
        "",
    ]
    if profile["rails"]:
        lines += ["| rail | network | resource | HCA | subnet | Gb/s |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {r['name']} | {r.get('network') or '-'} | {_code(r.get('resource')) or 'DRA claim'} | {r['hca']} "
            f"| {r.get('subnet') or '-'} | {r['speedGbps']} |"
            for r in profile["rails"]
        ]
        lines.append("")
    lines += ["NCCL / launcher env of a full-node pod:", "", "| variable | value |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in profile["ncclEnv"].items()]
    lines.append("")
    return "\n".join(lines)


@dataclass
class Rendered:
    run: Run
    objects: list[dict]
    packages: list[dict]
    files: dict[str, str]
    violations: list = field(default_factory=list)
    """What `python -m tools.lint` finds in `objects` (tools.lint.Violation)."""
    impact: Impact = field(default_factory=Impact)
    """What the change does to a cluster running the committed render."""


STATE_FILE = "state.json"
IMPACT_HEADING = "## Impact on the running cluster"


def committed_state(folder: Path) -> dict | None:
    """The state a committed render recorded (components/impact/state.py), or None."""
    path = folder / STATE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _committed_section(folder: Path) -> str | None:
    path = folder / "SUMMARY.md"
    if not path.is_file():
        return None
    text = path.read_text()
    if IMPACT_HEADING not in text:
        return None
    section = text[text.index(IMPACT_HEADING) :]
    nxt = section.find("\n## ", len(IMPACT_HEADING))
    return section if nxt < 0 else section[: nxt + 1]


def render_stack(stack: str, previous: Path | None = None) -> Rendered:
    """Render `stack` under the mocks, its last deployment being the render committed in `previous` (default
    rendered/<stack>): the program checks the impact against it as `pulumi preview` does against the stack's
    outputs, and SUMMARY.md says what the change does. The section stays as it was while the state does not move,
    so a committed render describes the change that made it."""
    from tools.lint import lint

    folder = previous or RENDERED / stack
    old = committed_state(folder)
    references = {preview.self_reference(stack): {preview.STATE_OUTPUT: old}} if old else None
    run = run_program(stack, references=references)
    objs = manifests(run)
    pkgs = packages(run)
    violations = lint(objs)
    state = integral(run.outputs.get(preview.STATE_OUTPUT))
    imp = impact(old, state)
    kept = _committed_section(folder) if old == state else None
    sections = [
        profile_section(integral(run.outputs.get("profile"))),
        jobs_section(integral(run.outputs.get("jobs") or {})),
        acceptance_section(integral(run.outputs.get("acceptance") or [])),
        policy_section(violations),
        destroy_section(integral(run.outputs.get("leftOnDestroy") or [])),
        kept or ack.markdown(imp, f"the committed render `{_rel(folder)}`"),
    ]
    files = {
        "manifests.yaml": dump_all(objs),
        "packages.yaml": dump_all(pkgs),
        "images.txt": images_txt(run, objs, pkgs),
        "charts.txt": inventory.text(inventory.charts(pkgs), "charts and kustomize sources the render installs"),
        "SUMMARY.md": summary(run, objs, pkgs, [s for s in sections if s]),
        STATE_FILE: json.dumps(state, indent=1, sort_keys=True) + "\n",
    }
    return Rendered(run, objs, pkgs, files, violations, imp)


def images_txt(run: Run, objs: list[dict], pkgs: list[dict]) -> str:
    """Every image the render names and every image its charts pull at their tags, from the stack's mirror."""
    registry = (integral(run.outputs.get("profile") or {}) or {}).get("imageMirror")
    pulled, derived = inventory.chart_images(pkgs, registry)
    doca = any(o.get("kind") == "NicClusterPolicy" and "ofedDriver" in (o.get("spec") or {}) for o in objs)
    derived = [d for d in derived if "doca-driver" not in d or doca]
    derived_images = integral(run.outputs.get("derivedImages") or [])
    if derived_images:  # named by the stack (gpu.precompiledDriver): no longer a per-node note
        derived = [d for d in derived if "nvcr.io/nvidia/driver" not in d]
    images = sorted({*inventory.images(objs, pkgs), *pulled, *derived_images})
    return inventory.text(images, "images the render and its charts pull (mirror these)", derived)


def jobs_section(jobs: dict) -> str:
    if not jobs:
        return ""
    lines = ["## Jobs", ""]
    scalar = [
        "kind",
        "namespace",
        "replicas",
        "fabric",
        "transport",
        "shm",
        "queue",
        "fullCluster",
        "priorityClass",
        "minAvailable",
        "checkpointDir",
    ]
    for name in sorted(jobs):
        c = jobs[name]
        lines += [f"### `{name}`", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {c[k] if c.get(k) is not None else '-'} |" for k in scalar]
        if "runtime" in c:  # a TrainJob: the contract is its effective pod (runtime merged with the job)
            lines.append(f"| runtime | {c['runtime']} |")
        lines.append(f"| faults | {c['faults']} |")
        if c.get("claims"):
            lines.append(f"| claims | {c['claims']} |")
        lines.append(f"| networks | {', '.join(c['networks']) or '-'} |")
        lines.append(f"| RDMA resources | {', '.join(f'`{k}`: {v}' for k, v in c['rdmaResources'].items()) or '-'} |")
        lines.append(f"| capabilities | {', '.join(c['capabilities']) or '-'} |")
        lines.append(f"| secrets | {', '.join(c['secretEnv']) or '-'} |")
        lines += ["", "| env | value |", "|---|---|"]
        lines += [f"| {k}{' (override)' if k in c['envOverrides'] else ''} | `{v}` |" for k, v in c["env"].items()]
        lines.append("")
        if c.get("runtimeOverrides"):
            lines += ["What the TrainJob changes of its runtime's wiring:", ""]
            lines += [f"- {p}" for p in c["runtimeOverrides"]]
            lines.append("")
    return "\n".join(lines)


def acceptance_section(runs: list[dict]) -> str:
    if not runs:
        return ""
    lines = [
        "## Fabric acceptance",
        "",
        f"One job, `{runs[0]['job']}`, runs each node count in turn in its own queue; save its launcher log "
        f"(`{runs[0].get('logs') or 'kubectl logs ' + runs[0]['job'] + '-launcher'} > {runs[0]['job']}.log`) "
        "and check each run:",
        "",
        "| nodes | ranks | expected transport | fail under (GB/s) | warn under (GB/s) | check |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['nodes']} | {r['ranks']} | {r['expect']} | {r.get('minBusbwGbps') or '-'} | "
            f"{r.get('warnBusbwGbps') or '-'} | `{r['check']}` |"
        )
    lines.append("")
    return "\n".join(lines)


def policy_section(violations: list) -> str:
    from tools.lint import format_text

    mandatory = sum(v.level == "mandatory" for v in violations)
    lines = [
        "## Policy check",
        "",
        f"`python -m tools.lint` over manifests.yaml: {len(violations)} violations, {mandatory} mandatory.",
        "",
    ]
    if violations:
        lines += ["```", format_text(violations).rstrip(), "```", ""]
    return "\n".join(lines)


def destroy_section(left: list[str]) -> str:
    if not left:
        return ""
    return "\n".join(["## What `pulumi destroy` leaves", "", *(f"- {item}" for item in left), ""])


def render_files(stack: str) -> dict[str, str]:
    return render_stack(stack).files


def _networks(names: list[str]) -> str:
    if len(names) > 2:  # eight rails would push the table off the screen
        return f"{len(names)}: {names[0]} .. {names[-1]}"
    return ", ".join(names) or "-"


def at_a_glance(rendered: Rendered, out: Path) -> str:
    """What `make render` prints: per job its transport and wiring, the policy result, where the rest is."""
    run = rendered.run
    jobs = integral(run.outputs.get("jobs") or {})
    rows = [("job", "kind", "nodes x GPUs", "transport", "rails/networks", "NCCL_NET", "queue")]
    for name in sorted(jobs):
        c = jobs[name]
        rows.append(
            (
                name,
                c["kind"],
                c["replicas"].removesuffix(" GPUs"),
                c["transport"],
                _networks(c["networks"]),
                c["env"].get("NCCL_NET", "-"),
                c["queue"] or "-",
            )
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = [
        f"{_rel(out)}: {len(rendered.objects)} Kubernetes objects, {len(rendered.packages)} packages, "
        f"{len(run.registrations)} resources",
        "",
    ]
    if len(rows) > 1:
        lines += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    else:
        lines.append("no jobs (fastpath:jobs)")
    if runs := integral(run.outputs.get("acceptance") or []):
        lines.append(
            f"fabric acceptance: {runs[0]['job']} on {', '.join(str(r['nodes']) for r in runs)} nodes, "
            f"expecting {', '.join(dict.fromkeys(r['expect'] for r in runs))}"
        )
    lines.append("")
    mandatory = sum(v.level == "mandatory" for v in rendered.violations)
    lines.append(f"policy: {len(rendered.violations)} violations, {mandatory} mandatory (python -m tools.lint)")
    imp = rendered.impact
    if imp.changes:
        lines.append(f"impact against the committed render: worst {imp.worst}")
        lines += [f"  {c.cls:11s} {c.id}: {c.what}" for c in imp.changes]
    lines.append(f"full summary: {_rel(out / 'SUMMARY.md')}")
    return "\n".join(lines)


def check(files: dict[str, str], out: Path) -> list[str]:
    diffs: list[str] = []
    for name, text in files.items():
        path = out / name
        old = path.read_text() if path.is_file() else ""
        if old != text:
            diffs.extend(
                difflib.unified_diff(
                    old.splitlines(True), text.splitlines(True), f"a/{_rel(path)}", f"b/{name} (fresh render)"
                )
            )
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.render", description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", default="dev", help="stack name (stacks/Pulumi.NAME.yaml); default dev")
    ap.add_argument("--out", type=Path, help="output folder; default rendered/NAME")
    ap.add_argument("--check", action="store_true", help="exit 1 with a diff when the committed output is stale")
    ap.add_argument("--stacks-dir", type=Path, help="folder of Pulumi.<stack>.yaml files; default stacks/")
    args = ap.parse_args(argv)
    global STACKS
    default_stacks, default_dir = STACKS, stack_model.STACKS_DIR
    if args.stacks_dir:
        STACKS = args.stacks_dir.resolve()
        try:
            stack_model.STACKS_DIR = str(STACKS.relative_to(Path.cwd()))
        except ValueError:
            stack_model.STACKS_DIR = str(STACKS)
    try:
        return _main(args)
    finally:
        STACKS, stack_model.STACKS_DIR = default_stacks, default_dir  # in-process callers (tests) get the defaults


def _main(args: argparse.Namespace) -> int:
    out = args.out or RENDERED / args.stack
    try:
        rendered = render_stack(args.stack)
        files = rendered.files
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - never a traceback: one line, and 2, not --check's "stale" 1
        print(
            f"{_rel(STACKS / f'Pulumi.{args.stack}.yaml')}: could not render: {type(err).__name__}: {str(err)[:300]}",
            file=sys.stderr,
        )
        return 2
    if args.check:
        diffs = check(files, out)
        if diffs:
            sys.stdout.writelines(diffs)
            print(
                f"\nrendered/{args.stack} is stale: run `make render STACK={args.stack}` and commit it.",
                file=sys.stderr,
            )
            return 1
        print(f"rendered/{args.stack} is up to date")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)
    print(at_a_glance(rendered, out))
    mandatory = [v for v in rendered.violations if v.level == "mandatory"]
    if mandatory:
        # Written anyway (SUMMARY.md shows every finding), but not a render to apply: the pack would refuse it.
        print(
            f"{_rel(STACKS / f'Pulumi.{args.stack}.yaml')}: the render has {len(mandatory)} mandatory policy "
            "violation(s) (SUMMARY.md lists them): `pulumi preview --policy-pack policies` would refuse it",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
