"""What Volcano v1.15.1 lets a queue hold when every queue wants more than the cluster has: its deserved share, and
whether a gang of N GPUs can ever start then. Pure.

fastpath's scheduler has no `enqueue` action, so the proportion plugin decides by its `deserved` share alone
(volcano-sh/volcano@v1.15.1:pkg/scheduler/plugins/proportion/proportion.go):
- OnSessionOpen: the queues with a job take part; each round every queue not yet met gets its weight's part of what
  is left, capped at its capability (min of the cluster and `spec.capability`) and at its request; a queue is met
  when its request is covered or its share stopped growing; the rounds end when nothing is left or nothing changes.
- AllocatableFn / PreemptiveFn: a task, and a reclaiming job's pending pods all together, fit only while the
  queue's allocated plus their request is at most its deserved (strict, no tolerance): a gang larger than its
  queue's share never starts while every queue has demand, however long it waits, whatever it reclaims.
- gangreclaim (actions/gangreclaim/gangreclaim.go) takes the victims from other reclaimable queues without
  checking that those are over their share.
On a full cluster (every queue asks for more than it can get) the request cap never binds, so the shares depend only
on weights, capabilities and the cluster's GPUs. GPUs only: CPU and memory are compared the same way, and a
whole-node job asks a node's share of each, so the GPU share decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Queue:
    name: str
    weight: int
    gpus: int | None  # capability; None: the whole cluster


def deserved(queues: Sequence[Queue], total: float, requests: dict[str, float] | None = None) -> dict[str, float]:
    """Each queue's deserved GPUs (proportion.go OnSessionOpen), for `requests` per queue (None: every queue asks
    for more than the cluster has). A queue that asks for nothing takes no part and deserves 0."""
    want = {q.name: (math.inf if requests is None else requests.get(q.name, 0.0)) for q in queues}
    cap = {q.name: min(total, q.gpus) if q.gpus is not None else total for q in queues}
    taking = [q for q in queues if want[q.name] > 0]
    share = {q.name: 0.0 for q in queues}
    met: set[str] = set()
    remaining = total
    while remaining > 0:
        weights = sum(q.weight for q in taking if q.name not in met)
        if weights == 0:
            break
        handed = 0.0
        for q in taking:
            if q.name in met:
                continue
            before = share[q.name]
            share[q.name] = min(before + remaining * q.weight / weights, cap[q.name], want[q.name])
            if share[q.name] >= want[q.name] or share[q.name] == before:
                met.add(q.name)
            handed += share[q.name] - before
        if handed <= 0:
            break
        remaining -= handed
    return share


@dataclass(frozen=True)
class FullCluster:
    """Whether a gang starts when every queue wants more than the cluster has, and what would make it."""

    starts: bool
    gpus: int
    queue: str
    share: float
    fix: str  # empty when it starts

    def __str__(self) -> str:
        share = f"{self.share:.4g}"
        if self.starts:
            return f"starts: {self.gpus} GPUs within {self.queue}'s share of {share} when every queue wants more"
        return (
            f"never while every queue wants more than its share: {self.gpus} GPUs over {self.queue}'s share of {share} "
            f"(Volcano v1.15.1 proportion: a gang fits only inside its queue's deserved share); {self.fix}"
        )


def full_cluster(queues: Sequence[Queue], total: int, queue: str, gpus: int) -> FullCluster:
    """Whether a gang of `gpus` in `queue` can start on a cluster of `total` GPUs whose every queue has demand, and
    if not, the smallest weight (or capability) of its queue that would let it."""
    share = deserved(queues, total)[queue]
    if gpus <= share:
        return FullCluster(True, gpus, queue, share, "")
    own = next(q for q in queues if q.name == queue)
    if gpus > min(total, own.gpus if own.gpus is not None else total):
        return FullCluster(False, gpus, queue, share, f"raise {queue}'s gpus to {gpus} or more, then its weight")
    others = [q for q in queues if q.name != queue]
    for weight in range(own.weight + 1, 65536):
        if deserved([*others, Queue(queue, weight, own.gpus)], total)[queue] >= gpus:
            return FullCluster(False, gpus, queue, share, f"a weight of {weight} for {queue} would let it start")
    return FullCluster(False, gpus, queue, share, f"no weight of {queue} lets it: lower the other queues' gpus")


# Kueue (scheduler.name kueue; components/platform/kueue.py): a queue's guarantee is its ClusterQueue's nominalQuota,
# fixed at render time from the weights, and a gang beyond it only borrows idle quota: with borrowWithinCohort Never
# a workload larger than its nominal never preempts (kubernetes-sigs/kueue@v0.19.2:pkg/scheduler/flavorassigner/
# flavorassigner.go fitsResourceQuota, canPreemptWhileBorrowing).


def kueue_nominal(queues: Sequence[Queue], nodes: int, per_node: int) -> dict[str, int]:
    """Each queue's guaranteed GPUs: its weight's share of the nodes in whole nodes (largest remainders first, then
    the queues' order), at most its `gpus`."""
    total = sum(q.weight for q in queues)
    exact = [nodes * q.weight / total for q in queues]
    share = [int(x) for x in exact]
    for i in sorted(range(len(queues)), key=lambda i: (share[i] - exact[i], i))[: nodes - sum(share)]:
        share[i] += 1
    return {
        q.name: min(s * per_node, q.gpus) if q.gpus is not None else s * per_node
        for q, s in zip(queues, share, strict=True)
    }


def kueue_full_cluster(queues: Sequence[Queue], nodes: int, per_node: int, queue: str, gpus: int) -> str:
    """Whether a gang of `gpus` in `queue` starts on a cluster whose every queue has demand, under Kueue."""
    nominal = kueue_nominal(queues, nodes, per_node)[queue]
    if gpus <= nominal:
        return (
            f"starts: {gpus} GPUs within {queue}'s guaranteed {nominal} (Kueue nominalQuota; reclaimed from queues "
            "borrowing beyond theirs)"
        )
    return (
        f"only on idle GPUs: {gpus} GPUs over {queue}'s guaranteed {nominal} (Kueue nominalQuota); it borrows what "
        f"other queues leave idle and never preempts for it: raise {queue}'s weight"
    )
