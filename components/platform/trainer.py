"""Kubeflow Trainer v2: its controller and JobSet from the `kubeflow-trainer` chart, and the ClusterTrainingRuntimes
fastpath publishes, one per framework and priority tier, each a whole node of this cluster wired for its fabric.

Upstream behaviour this relies on (kubeflow/trainer@v2.3.0: charts/kubeflow-trainer/ and pkg/runtime/;
kubernetes-sigs/jobset@v0.12.0; the code below names each file):
- The chart installs the trainer controller, its CRDs (chart templates, so upgraded), and JobSet as a subchart
  (`jobset.install`); the controller makes its own webhook certificate (`certManagement.enable`), no cert-manager.
- The trainer's volcano plugin watches PodGroups only if their CRD exists when it starts, so the release waits for
  Volcano's.
- Runtimes and TrainJobs go through the trainer's webhook (`failurePolicy: Fail`): runtimes wait for the release,
  which Pulumi awaits until the controller is ready.
- A TrainJob's pods take their priority from the runtime's pod template, which a TrainJob cannot patch: hence one
  runtime per tier (components/model/profile.py `runtime_name`), e.g. `fastpath-torch`, `fastpath-torch-critical`.
- The controller snapshots a runtime when a TrainJob first uses it: a republished runtime changes new runs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import k8s, versions
from components.jobs import trainjob
from components.model.config import PlatformConfig
from components.model.profile import Profile
from components.platform import mirrors, placement

TOKEN = "fastpath:platform:Trainer"
NAMESPACE = "kubeflow-system"  # upstream's, and the trainer's certificate code's fallback namespace
COMPONENT = "trainer"
RELEASE = "kubeflow-trainer"
# The chart's controller ServiceAccount: `trainer.fullname`-controller-manager in the release namespace, fullname being
# the release name when it contains the chart name (kubeflow/trainer@v2.3.0:charts/kubeflow-trainer/templates/
# _helpers.tpl trainer.fullname, manager/_helpers.tpl trainer.manager.name, rbac/_helpers.tpl
# trainer.manager.serviceAccount.name, rbac/service_account.yaml).
CONTROLLER_SERVICE_ACCOUNT = f"{RELEASE}-controller-manager"
PRIORITY_CLASS_READER = "fastpath-trainer-priorityclass-reader"
# Fields of a runtime's JobSet template the CRD makes immutable (`self == oldSelf`, from kubernetes-sigs/jobset@
# v0.12.0:api/jobset/v1alpha2/jobset_types.go; kubeflow/trainer@v2.3.0:manifests/base/crds/
# trainer.kubeflow.org_clustertrainingruntimes.yaml): a change to one is a new runtime, not a patch.
RUNTIME_IMMUTABLE = [
    f"spec.template.spec.{f}"
    for f in (
        "failurePolicy",
        "network",
        "successPolicy",
        "startupPolicy",
        "volumeClaimPolicies",
        "replicatedJobs[*].dependsOn",
    )
]


def values(platform: PlatformConfig) -> dict[str, Any]:
    """Helm values for kubeflow-trainer: the controller and JobSet images pinned, the chart's own runtimes off, the
    controllers on the system nodes when the stack names them."""
    return k8s.merge_values(_values(platform), placement.site_values(versions.TRAINER_CHART, platform))


def _values(platform: PlatformConfig) -> dict[str, Any]:
    return {
        # The chart derives `v<chart version>` when empty (templates/_helpers.tpl): pinned, so a chart bump moves
        # the controller only with this file.
        "image": {"tag": versions.trainer_controller_tag(platform.versions.trainer)},
        # The subchart's in-repo values name a staging `:main` image pulled Always; only the published chart's
        # are rewritten to the release (kubernetes-sigs/jobset@v0.12.0:hack/helm-chart-package.sh).
        "jobset": {
            "image": {
                "repository": versions.JOBSET_IMAGE_REPOSITORY,
                "tag": versions.JOBSET_FOR_TRAINER[platform.versions.trainer],
                "pullPolicy": "IfNotPresent",
            }
        },
        # Off by default already; pinned because turning them on runs a hook Job that installs kubectl from the
        # internet (templates/runtimes/installer-job.yaml) and publishes runtimes that skip validation and carry
        # no fabric wiring.
        "runtimes": {"defaultEnabled": False},
    }


def priority_class_rbac(cluster: str) -> list[dict[str, Any]]:
    """Read access to PriorityClasses for the trainer controller, which the v2.3.0 chart does not grant
    (charts/kubeflow-trainer/templates/rbac/clusterrole.yaml; no kubebuilder marker in pkg/): the volcano plugin's
    TrainJob validation Gets the runtime's PriorityClass through the manager's cached client
    (pkg/runtime/framework/plugins/volcano/volcano.go Validate), whose informer then never syncs, and the webhook
    refuses every TrainJob with "context deadline exceeded". kubeflow/trainer PR #3918 adds this rule to the chart:
    drop these once the pinned chart has it."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": k8s.meta(PRIORITY_CLASS_READER, cluster, COMPONENT),
            "rules": [
                {
                    "apiGroups": ["scheduling.k8s.io"],
                    "resources": ["priorityclasses"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": k8s.meta(PRIORITY_CLASS_READER, cluster, COMPONENT),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PRIORITY_CLASS_READER},
            "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
    ]


def runtimes(profile: Profile, acceptance: bool = False) -> list[dict[str, Any]]:
    """Every ClusterTrainingRuntime this cluster publishes (components/jobs/trainjob.py builds each, so a
    TrainJob's contract is read off the same object); with `acceptance` (a v2 fabric acceptance), its own too."""
    out = [trainjob.runtime(profile, framework, tier) for _, framework, tier in profile.runtimes()]
    if acceptance:
        out.append(trainjob.acceptance_runtime(profile))
    return out


def publishes_acceptance(platform: PlatformConfig) -> bool:
    """The v2 fabric acceptance (a TrainJob on a v2-only cluster, or on Kueue) names a runtime of its own."""
    return platform.acceptance.enabled and platform.acceptance_api == "v2"


@dataclass
class TrainerArgs:
    platform: PlatformConfig
    """The validated platform (jobApi v2 or both). Required."""
    profile: Profile
    """Its profile: the runtimes are built from it. Required."""
    after: list = field(default_factory=list)
    """What the release waits for: Volcano's release (the PodGroup CRD must exist when the controller starts).
    Default none."""


class Trainer(pulumi.ComponentResource):
    """Installs Kubeflow Trainer v2 and JobSet (chart `kubeflow-trainer`, version pinned in components/versions.py)
    in `kubeflow-system`, and publishes fastpath's ClusterTrainingRuntimes (torch, mpi when trainer.mpiImage is set,
    plain; one per priority tier with Volcano).

    Needs: Volcano's release before it when Volcano is on; the training namespaces' network attachments, preflight
    ConfigMap and checkpoint claim before any TrainJob runs (runtimes only name them).
    Output: `runtimes`, the names TrainJobs refer to.

    Example:
        Trainer("trainer", TrainerArgs(cfg.platform, profile(cfg.platform), after=[volcano.release]),
                pulumi.ResourceOptions(parent=platform))
    """

    release: pulumi.Resource
    """The Helm release; runtimes wait for it (the trainer's webhook must serve)."""
    rbac: list[pulumi.Resource]
    """The PriorityClass reader role and its binding, before the release (priority_class_rbac)."""
    runtimes: list[pulumi.Resource]
    """One ClusterTrainingRuntime per framework and tier."""

    def __init__(self, name: str, args: TrainerArgs, opts: pulumi.ResourceOptions | None = None):
        manifests = runtimes(
            args.profile, publishes_acceptance(args.platform)
        )  # built before anything registers: a bad profile registers nothing
        super().__init__(TOKEN, name, None, opts)
        p = args.platform
        self.namespace = k8s.apply(
            k8s.namespace(
                NAMESPACE,
                p.cluster,
                COMPONENT,
                "restricted",
                "the trainer and JobSet controllers run as non-root with no capabilities "
                "(the charts' securityContext); training pods run in the training namespaces",
            ),
            pulumi.ResourceOptions(parent=self),
        )
        # Before the controller starts, so its PriorityClass informer lists at once (a reflector would recover by
        # itself later, after refusing TrainJobs meanwhile).
        self.rbac = [k8s.apply(m, pulumi.ResourceOptions(parent=self)) for m in priority_class_rbac(p.cluster)]
        self.release = k8s.helm_release(
            RELEASE,
            *mirrors.chart_source(versions.TRAINER_CHART, None, p.mirrors),
            p.versions.trainer,
            NAMESPACE,
            values(p),
            # The trainer CRDs are chart templates without `helm.sh/resource-policy: keep`, and the chart has no
            # value to add it (templates/crd/*): deleting the release deletes every TrainJob, runtime, JobSet
            # and running pod with them. So Pulumi refuses to delete or replace it (protect) and, once unprotected,
            # only forgets it (retain_on_delete): removing the trainer is a deliberate `helm uninstall`.
            pulumi.ResourceOptions(
                parent=self, depends_on=[self.namespace, *self.rbac, *args.after], protect=True, retain_on_delete=True
            ),
        )
        # A changed immutable field replaces the runtime, deleted first (same name). TrainJobs already running keep
        # the copy the controller took at their first reconcile (their `<trainjob>-runtime-snapshot` ConfigMap,
        # kubeflow/trainer@v2.3.0:pkg/runtime/core/snapshot.go), so they run on unchanged; a TrainJob created in
        # the seconds the name is missing is refused by the webhook ("must be created before the TrainJob"), and
        # every later one gets the new runtime. Other fields update in place and reach new TrainJobs only.
        # The release's readiness does not cover the webhook handlers, registered just after readyz passes
        # (cmd/trainer-controller-manager/main.go setupManagerComponents): a runtime created in that window is
        # refused, and a second `pulumi up` creates it (README, "Trainer v2 install").
        after = pulumi.ResourceOptions(
            parent=self, depends_on=[self.release], replace_on_changes=RUNTIME_IMMUTABLE, delete_before_replace=True
        )
        self.runtimes = [k8s.apply(m, after) for m in manifests]
        self.register_outputs({"runtimes": [m["metadata"]["name"] for m in manifests]})
