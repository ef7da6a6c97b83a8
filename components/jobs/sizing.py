"""How big each pod of a job is, from the node it runs on.

What an experienced platform engineer expects, stated so it can be argued with:
- memory limit = 90% of the node's allocatable memory for the GPUs used (DaemonSets need the rest), and the
  request equals the limit so the scheduler counts it;
- /dev/shm = a memory-backed emptyDir of 16 GiB per GPU, at most a quarter of the memory limit. tmpfs pages are
  charged to the container, so shm always sits inside the limit, never beside it;
- CPUs = 90% of the node's share, requests = limits.
"""

from __future__ import annotations

import math

from components.model.job import JobSpec
from components.model.profile import Profile

SHM_GIB_PER_GPU = 16
NODE_SHARE = 0.9


def _share(total: int, gpus: int, per_node: int) -> int:
    return max(1, math.floor(total * gpus / per_node * NODE_SHARE))


def _cores(cpus: int) -> int:
    """Whole cores (an even count of hyperthreads): a kubelet with the static CPU manager's full-pcpus-only
    policy refuses a Guaranteed pod asking for an odd count (SMTAlignmentError), which would fail the job."""
    return cpus if cpus < 2 else cpus - cpus % 2


def sizing(spec: JobSpec, profile: Profile) -> tuple[int, int, int, int]:
    """(gpus, memory GiB, shm GiB, cpus) of each pod."""
    per_node = profile.gpu.per_node
    gpus = spec.gpus_per_node or per_node
    memory = spec.memory_gib or _share(profile.nodes.memory_gib, gpus, per_node)
    shm = spec.shm_gib or max(1, min(SHM_GIB_PER_GPU * gpus, memory // 4))
    cpus = spec.cpus or _cores(_share(profile.nodes.cpus, gpus, per_node))
    return gpus, memory, shm, cpus
