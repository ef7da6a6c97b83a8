"""Reads of the objects a job uses that no stack makes (fastpath:existing): on a real cluster each is read through
the provider during the preview, so a Secret or claim that is missing fails the preview, naming it, instead of a
gang that holds its GPUs in CreateContainerConfigError. The offline renderer's mocks answer the reads."""

from __future__ import annotations

from typing import Any

from components.model.job import JobSpec, references


def reads(spec: JobSpec, namespace: str, opts: Any = None) -> list[Any]:
    """One read per object `spec` uses (components/model/stack.py references), named after the job."""
    import pulumi_kubernetes as k8s

    out: list[Any] = []
    for kind, ref, _ in references(spec, namespace):
        name = f"{namespace}-{spec.name}-needs-{kind[:-1]}-{ref.split('/', 1)[1]}"
        if kind == "secrets":
            out.append(k8s.core.v1.Secret.get(name, ref, opts=opts))
        else:
            out.append(k8s.core.v1.PersistentVolumeClaim.get(name, ref, opts=opts))
    return out
