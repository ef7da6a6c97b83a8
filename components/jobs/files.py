"""A job's `files`: read from the Pulumi project into the immutable ConfigMap its pods mount at FILES_MOUNT, named
by a hash of their contents."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from components import k8s
from components.jobs.resolve import COMPONENT, JOB_LABEL, Resolved
from components.model.job import JobSpec

FILES_MOUNT = "/workspace/files"


def files_data(spec: JobSpec, root: Path | None = None) -> dict[str, str]:
    base = root or Path.cwd()
    return {name: (base / local).read_text() for name, local in sorted(spec.files.items())}


def files_configmap_name(spec: JobSpec) -> str:
    """`<job>-files-<hash>`: an edited file is a new, immutable ConfigMap and a changed job (a review diff), never
    new code under a running job's feet at its next torchrun restart."""
    digest = hashlib.sha256(json.dumps(files_data(spec), sort_keys=True).encode()).hexdigest()[:8]
    return f"{spec.name}-files-{digest}"


def files_configmap(r: Resolved) -> dict | None:
    """The job's `files`, read from the Pulumi project, as the ConfigMap its pods mount at /workspace/files."""
    if not r.spec.files:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.meta(
            files_configmap_name(r.spec),
            r.profile.cluster,
            COMPONENT,
            namespace=r.namespace,
            extra_labels={JOB_LABEL: r.spec.name},
        ),
        "immutable": True,
        "data": files_data(r.spec),
    }
