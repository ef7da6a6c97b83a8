"""Generate docs/config.md (the stack config reference, from the pydantic models and their field docstrings)
and policies/README.md (the rule catalogue, from the `@rule` metadata in policies/rules/).

    python -m tools.gendocs [--check]
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

if typing.TYPE_CHECKING:
    from policies.engine import Rule

from components.model import config, job

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "config.md"
POLICIES_OUT = ROOT / "policies" / "README.md"


def _type(ann: object) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [_type(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" (optional)" if type(None) in args else "")
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"[{ann.__name__}](#{ann.__name__.lower()})"
    return getattr(ann, "__name__", str(ann)).replace("IPv4Network", "IPv4 CIDR")


def _models(ann: object) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in _models(a)]


def lint_doc() -> str:
    """The linter's own usage text: its input, output, config and exit codes are documented once, there."""
    from tools import lint

    return (lint.__doc__ or "").strip()


def generate() -> str:
    lines = [
        "# Stack config reference",
        "",
        "Generated from `components/model/config.py` and `components/model/job.py` by `python -m tools.gendocs`; "
        "do not edit by hand.",
        "",
        "A stack file `stacks/Pulumi.<stack>.yaml` sets up to four keys: `fastpath:platform`, one "
        "[PlatformConfig](#platformconfig) describing the cluster; `fastpath:jobs`, a list of "
        "[JobSpec](#jobspec) (may be absent); `fastpath:acknowledge` (may be absent), a map from a change id, "
        "as `pulumi preview`, `make render` or `make diff` print it, to the class it was told as (`disruptive` or "
        "`destructive`) and that change's fingerprint, for example `fabric.sriov: disruptive 894a875d`: without it "
        "an update that drains, reboots or deletes what runs stops before it starts (docs/architecture.md, Day 2); "
        "and `fastpath:existing` (may be absent), the objects jobs use that the stack does not make, as "
        "`{secrets: [namespace/name], claims: [namespace/name]}`: a job naming a Secret (secretEnv) or claim "
        "(datasets) not listed there is refused, and on a real cluster each listed one is read first, so a preview "
        "fails while it is missing. Unknown keys are refused.",
        "",
    ]
    seen: list[type[BaseModel]] = []
    queue: list[type[BaseModel]] = [config.PlatformConfig, job.JobSpec]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.append(model)
        lines += [f"## {model.__name__}", ""]
        if model.__doc__ and model is not config.PlatformConfig:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| key | type | meaning and default |", "|---|---|---|"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `{key}` | {_type(field.annotation)} | {desc} |")
            queue += _models(field.annotation)
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _remediable(rules: list[Rule]) -> str:
    """The sentence naming the rules that fix what they find under enforcementLevel `remediate`."""
    ids = [f"`{r.id}`" for r in rules if r.remediate is not None]
    if not ids:
        return "No rule remediates: enforcementLevel `remediate` acts as mandatory."
    return (
        f"{', '.join(ids)} can remediate (enforcementLevel `remediate` applies the fix its column names, nothing "
        "else); for every other rule `remediate` acts as mandatory."
    )


def _stack(rules: list[Rule]) -> str:
    """The sentence naming the rules CrossGuard runs as stack policies, and why."""
    ids = [f"`{r.id}`" for r in rules if r.stack]
    if not ids:
        return ""
    kinds = ", ".join(sorted({k for r in rules if r.stack for k in r.kinds or ()}))
    return (
        f" {', '.join(ids)} needs the objects a {kinds} names (its runtime), so CrossGuard runs it as a stack "
        f"policy, which sees the whole stack; the {kinds} is judged there only, with the other rules' findings "
        "prefixed by their id, at their default settings (a policy gets only its own config)."
    )


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:]


def _areas(rules: list[Rule]) -> list[str]:
    """One section per module of policies/rules/, in the catalogue's order: what the area covers (its module's
    docstring), then its rules."""
    from policies.rules import AREAS

    lines = []
    for area in AREAS:
        doc = " ".join((importlib.import_module(f"policies.rules.{area}").__doc__ or "").split())
        lines += [
            f"### {doc.split(':', 1)[0]} (`policies/rules/{area}.py`)",
            "",
            _sentence(doc.split(":", 1)[-1]),
            "",
            "| id | level | title | what it checks | fix | config |",
            "|---|---|---|---|---|---|",
        ]
        for r in rules:
            if r.area != area:
                continue
            params = ", ".join(f"`{k}` (default {d}): {desc}" for k, (d, desc) in r.params.items()) or "-"
            lines.append(
                f"| `{r.id}` | {r.level}{' (+advisory)' if r.mixed else ''} | {r.title} | {r.description} | "
                f"{_cell(r.remediation)} | {params} |"
            )
        lines.append("")
    return lines


# Where a rule's reach was debatable on real manifests (issue 20's field corpora), the choice and why.
SCOPE = [
    "## Scope decisions",
    "",
    "Real manifests nobody here wrote (tests/lint_corpus/field/, judged by hand first) put a few rules' reach in "
    "question. The choices:",
    "",
    "- NCCL rules (`nccl-net-set`, `nccl-ib-hca`) judge pods that run NCCL: the workload requests GPUs, or the pod "
    "sets an NCCL_* variable, and the pod is not an RDMA test tool's (perftest, rping, `ib_write_bw`). "
    "`nccl-ib-enabled` judges every RDMA pod that sets NCCL variables, whatever else it runs.",
    "- `nccl-net-set` stays mandatory on vendors' working examples: they work while the RDMA device is there; the "
    "rule is about the day it is not, when NCCL falls back to TCP without a word.",
    "- `rdma-ipc-lock` applies to EFA as to InfiniBand and RoCE: libfabric's EFA provider registers memory "
    "through the same verbs call, and a node image's unlimited memlock is the node's choice, not the pod's; the "
    "capability states the pod's need.",
    "- `clean-pod-policy` applies to CPU jobs too: a finished job's Running pods hold their CPUs and memory.",
    "- Gang and checkpoint rules judge GPU workloads: a CPU job's partial start holds no GPUs.",
    "- Images: the rules judge what is applied. A kustomize base whose images an overlay pins is linted as its "
    "overlay renders it (`kustomize build overlay | python -m tools.lint -`); the base alone reads as unpinned. A "
    "tag without a digit (`openmpi`, `slim`) is a name rebuilt in place: unpinned. An upper-case image name "
    "(`PLACEHOLDER`) or an angle-bracket slot is a placeholder: `judgeable`.",
    "- Host-network pods of a GPU workload, diagnostic pods included, need ClusterFirstWithHostNet "
    "(`hostnetwork-dns`): a pod that resolves no cluster name can say so with dnsPolicy Default.",
    "- Gang schedulers recognised: Volcano (its Job's minAvailable 0 is every task's replicas, the webhook's default), "
    "Kueue (the queue label, on a kind Kueue v0.19.2 admits whole: not the Training Operator's MPIJob v1, nor a "
    "runtime; an AppWrapper's for what it wraps; a runtime without a PodGroup when every namespace it serves has "
    "Kueue's LocalQueue `default`), the KAI Scheduler (schedulerName), a TrainJob runtime's podGroupPolicy.",
    "- DRA pods: a container gets a claim's GPUs and NICs only if it lists the claim (resources.claims), and the "
    "claims and DeviceClasses must be among the objects linted: CrossGuard's per-resource policies see a DRA pod "
    "without its claimed devices. Whole-node (allocationMode All) and firstAvailable GPUs are not counted. A pod "
    "whose NICs are claimed needs no NCCL_IB_HCA (dranet adds only its own NICs' devices).",
    "- `dra-nic-alignment` judges claims for part of a node on HGX-class boards (one GPU and one NIC per PCIe "
    "root): dranet's 2 + 2 demo under one constraint (a p4d shape) and its Grace claims pinned by NUMA are flagged; "
    "a NIC request whose count reaches the NICs its class names one by one counts as the whole node.",
    "- `mnnvl-compute-domain` cannot see a device plugin configured to inject IMEX channels (imex.channelIDs): "
    "exempt such pods by label.",
    "",
]


def generate_policies() -> str:
    from policies.engine import RULES

    lines = [
        "# fastpath policy pack",
        "",
        "Generated from `policies/rules/` by `python -m tools.gendocs`; do not edit by hand.",
        "",
        "Rules that stop a misconfigured training job before it burns GPU-hours. The same rules run two ways:",
        "",
        "```sh",
        "pulumi preview --policy-pack policies [--policy-pack-config policy.json]   # under the Pulumi engine",
        "python -m tools.lint rendered/prod-ib/manifests.yaml [--config policy.yaml] [--format json]   # offline",
        "```",
        "",
        "`tools.lint`, as its `--help` says (from tools/lint.py):",
        "",
        "```",
        lint_doc(),
        "```",
        "",
        "Pod templates are found in Pods, Deployments, StatefulSets, DaemonSets, Jobs, CronJobs, the Kubeflow "
        "v1 jobs (PyTorchJob, MPIJob v1 and v2beta1, TFJob, XGBoostJob, PaddleJob, JAXJob), TrainJob, "
        "(Cluster)TrainingRuntime, Volcano Jobs, JobSets, Ray and LeaderWorkerSet; an unknown kind that "
        "requests GPUs is searched for pod specs and reported (`judgeable`). A TrainJob's pods are those its "
        "runtime gives it (kubeflow/trainer@v2.3.0's merge, `components/jobs/runtime_v2/controller.py`), judged when "
        "the runtime is among the objects checked (`policies/runtimes.py`). An AppWrapper's components are judged as "
        "the objects its controller creates, in its namespace and under its Kueue queue (`policies/wrappers.py`); "
        "findings are reported on the AppWrapper, naming the component.",
        "",
        "Mixed rules report their advisory findings through a second CrossGuard policy named `<id>-advisory`. "
        f"{_remediable(RULES)}{_stack(RULES)} Each rule's metadata sits on its function (`@rule` in the "
        "module of its area, below); the fix column is also what CrossGuard shows as the policy's remediation "
        "steps. Every rule also takes `exemptNamespaces` and `exemptLabels`. Fixtures: "
        "`tests/policies/<rule-id>/{pass,fail}/*.yaml`.",
        "",
        *SCOPE,
        "## Rules by area",
        "",
        *_areas(RULES),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gendocs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/config.md is out of date")
    args = ap.parse_args(argv)
    outputs = {OUT: generate(), POLICIES_OUT: generate_policies()}
    if args.check:
        stale = [p for p, text in outputs.items() if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
