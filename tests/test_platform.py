"""Platform (components/platform/component.py): the packages it installs and their Helm values against upstream, namespaces,
the resource graph and install order, and the profile it exports."""

import json

import pytest
import yaml

from components.platform import component as platform
from tests.conftest import STACKS, stack_platform
from tests.helpers import cfg, regs
from tools import upstream

VALUES_FILES = {
    "gpu-operator": "gpu-operator.values.yaml",
    "network-operator": "network-operator.values.yaml",
    "volcano": "volcano.values.yaml",
    "csi-driver-nfs": "csi-driver-nfs.values.yaml",
    "kubeflow-trainer": "kubeflow-trainer.values.yaml",
    "nvsentinel": "nvsentinel.values.yaml",
    "kueue": "kueue.values.yaml",
    "topograph": "topograph.values.yaml",
    "dranet": "dranet.values.yaml",
    "dra-driver-nvidia-gpu": "dra-driver-nvidia-gpu.values.yaml",
}
# NVSentinel's sub-charts whose values files are locked: the umbrella passes `<sub-chart>:` through to them.
NVSENTINEL_SUBCHARTS = ("fault-quarantine", "node-drainer", "nic-health-monitor")
# Charts whose values files are not locked (components/platform/health.py cert_manager_values says where its keys
# are documented): their values are not checked here.
UNCHECKED = {"cert-manager"}


def chart_values(name: str) -> dict:
    values = yaml.safe_load(upstream.path(f"values/{VALUES_FILES[name]}").read_text())
    if name == "nvsentinel":
        for sub in NVSENTINEL_SUBCHARTS:
            values[sub] = yaml.safe_load(upstream.path(f"values/nvsentinel_subchart_{sub}.values.yaml").read_text())
    return values


def leaf_paths(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from leaf_paths(v, (*prefix, k))
        else:
            yield (*prefix, k)


# Keys a chart's templates read that its values.yaml documents only in a comment.
TEMPLATE_ONLY_KEYS = {
    # volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/templates/controllers.yaml renders the controller
    # config map from it with toYaml (values.yaml has it empty): its keys are the controller's (tests/
    # volcano_topology_v115.py label_levels reads the label discovery this sets).
    ("volcano", ("custom", "controller_config_override")),
    # NVIDIA/topograph@v1.0.0:charts/topograph/templates/nodeObserver/configmap.yml passes provider, engine and the
    # trigger through toYaml whole (engine.params and provider.params are the provider's and engine's own, documented
    # in docs/engines/k8s.md and docs/providers/*.md); templates/configmap.yml reads config.credentialsSecret, which
    # values.yaml shows commented out; the broker's security contexts are a container's and pod's, through toYaml
    # (values.k8s.ib-example.yaml sets the same keys).
    ("topograph", ("engine", "params")),
    ("topograph", ("provider", "params")),
    ("topograph", ("nodeObserver", "topograph", "trigger")),
    ("topograph", ("config", "credentialsSecret")),
    ("topograph", ("nodeDataBroker", "securityContext")),
    ("topograph", ("nodeDataBroker", "podSecurityContext")),
    # volcano-sh/volcano@v1.15.1:installer/helm/chart/volcano/templates/scheduler.yaml reads it; values.yaml shows
    # it commented out under `custom:`.
    ("volcano", ("custom", "scheduler_config_override")),
    # The JobSet subchart's own values, passed through the parent under `jobset:` (kubeflow-trainer 2.3.0
    # Chart.yaml dependency jobset 0.12.0): kubernetes-sigs/jobset@v0.12.0:charts/jobset/values.yaml has
    # image.repository, image.tag and image.pullPolicy; the parent's values.yaml lists only install/fullnameOverride.
    ("kubeflow-trainer", ("jobset", "image", "repository")),
    ("kubeflow-trainer", ("jobset", "image", "tag")),
    ("kubeflow-trainer", ("jobset", "image", "pullPolicy")),
    # NVSentinel sub-charts whose values files are not locked, read at lalitadithya/NVSentinel@e002c5dc (the commit
    # registering v1.19.0): charts/kubernetes-object-monitor/values.yaml `policies`, charts/janitor-provider/
    # values.yaml `csp.provider`, charts/labeler/values.yaml `assumeDriverInstalled`.
    ("nvsentinel", ("kubernetes-object-monitor",)),
    ("nvsentinel", ("labeler",)),
    # charts/mongodb-store/values.yaml passes `mongodb:` to Bitnami's mongodb 16.2.2 chart (persistence.storageClass).
    ("nvsentinel", ("mongodb-store",)),
    ("nvsentinel", ("janitor-provider",)),
    # The NFD 0.19.0 sub-chart's own values (gpu-operator@v26.7.0:deployments/gpu-operator/charts/
    # node-feature-discovery/values.yaml master.nodeSelector/tolerations, gc.nodeSelector/tolerations), not repeated
    # in the parent's values file: components/platform/placement.py places them on the system nodes.
    ("gpu-operator", ("node-feature-discovery", "master", "nodeSelector")),
    ("gpu-operator", ("node-feature-discovery", "master", "tolerations")),
    ("gpu-operator", ("node-feature-discovery", "gc", "nodeSelector")),
    ("gpu-operator", ("node-feature-discovery", "gc", "tolerations")),
    # The JobSet sub-chart's (kubernetes-sigs/jobset@v0.12.0:charts/jobset/values.yaml controller.nodeSelector and
    # controller.tolerations), under the trainer chart's `jobset:`.
    ("kubeflow-trainer", ("jobset", "controller")),
    # The SR-IOV sub-chart's (network-operator@v26.4.1:deployment/network-operator/charts/sriov-network-operator/
    # values.yaml operator.nodeSelector, operator.tolerations; tests/test_placement.py reads its default tolerations).
    ("network-operator", ("sriov-network-operator", "operator", "nodeSelector")),
    ("network-operator", ("sriov-network-operator", "operator", "tolerations")),
    # Sub-charts' image keys a disconnected stack points at its mirror (components/platform/mirrors.py KEYS; each cited
    # in docs/research/airgap-images-*.md at its tag): NFD 0.19.0's image, the DOCA init container's, NVSentinel's
    # modules, the janitor's Jobs and the MongoDB store's.
    ("gpu-operator", ("node-feature-discovery", "image", "repository")),
    ("network-operator", ("operator", "ofedDriver")),
    ("nvsentinel", ("gpu-health-monitor",)),
    ("nvsentinel", ("syslog-health-monitor",)),
    ("nvsentinel", ("metadata-collector",)),
    ("nvsentinel", ("janitor",)),
    ("nvsentinel", ("fault-remediation", "image", "repository")),
    ("nvsentinel", ("fault-quarantine", "image", "repository")),
    ("nvsentinel", ("node-drainer", "image", "repository")),
    ("nvsentinel", ("nic-health-monitor", "image", "repository")),
    ("nvsentinel", ("kubernetes-object-monitor", "image", "repository")),
    ("nvsentinel", ("global", "initContainerImage", "repository")),
    ("nvsentinel", ("platformConnector", "image", "repository")),
    ("kubeflow-trainer", ("image", "registry")),
}


# Maps whose keys are the user's (node labels), even where the chart's default has some (gpu-operator's
# operator.nodeSelector: {kubernetes.io/os: linux}); volcano names its nodeSelectors <component>_ns.
FREE_FORM = {"nodeSelector", "systemNodeSelector", "scheduler_ns", "controller_ns", "admission_ns"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_helm_value_key_exists_upstream(stack, rendered):
    for pkg in rendered(stack).packages:
        if pkg["kind"] != "helm":
            continue
        if pkg["name"] in UNCHECKED:
            continue
        chart = chart_values(pkg["name"])
        for path in leaf_paths(pkg["values"]):
            if any((pkg["name"], path[:n]) in TEMPLATE_ONLY_KEYS for n in range(1, len(path) + 1)):
                continue
            node, parent = chart, None
            for k in path:
                if node == {} or parent in FREE_FORM:  # a free-form map upstream (nodeSelector, labels): any key
                    break
                parent = k
                assert isinstance(node, dict) and k in node, f"{pkg['name']}: {'.'.join(path)} not in chart values"
                node = node[k]


@pytest.mark.parametrize("stack", STACKS)
def test_no_helm_value_restates_a_chart_default_unmarked(stack, rendered):
    """Values say only what differs from the chart. A value equal to the chart's default is allowed only where
    the builder pins it on purpose (a comment says why), listed here: gpu-operator@v26.7.0
    deployments/gpu-operator/values.yaml (`nfd.enabled`, `driver.enabled`, `dcgmExporter.serviceMonitor.enabled`
    are true there), network-operator@v26.4.1 deployment/network-operator/values.yaml
    (`sriov-network-operator.sriovOperatorConfig.deploy: true`), kubeflow/trainer@v2.3.0
    charts/kubeflow-trainer/values.yaml (`runtimes.defaultEnabled: false`: enabling runs a hook that fetches kubectl
    from the internet and publishes runtimes without fabric wiring)."""
    pinned = {
        ("gpu-operator", ("nfd", "enabled")),
        ("gpu-operator", ("driver", "enabled")),
        ("gpu-operator", ("dcgmExporter", "serviceMonitor", "enabled")),
        ("network-operator", ("sriov-network-operator", "sriovOperatorConfig", "deploy")),
        ("kubeflow-trainer", ("runtimes", "defaultEnabled")),
        # components/platform/health.py: the DCGM hostengine named for the GPU Operator fastpath installs, and the
        # circuit breaker the issue wants on, whatever a later chart defaults to.
        ("nvsentinel", ("podMonitor", "enabled")),
        ("nvsentinel", ("global", "dcgm", "mode")),
        ("nvsentinel", ("global", "dcgm", "service", "endpoint")),
        ("nvsentinel", ("global", "dcgm", "service", "port")),
        ("nvsentinel", ("fault-quarantine", "circuitBreaker", "enabled")),
        ("nvsentinel", ("fault-quarantine", "circuitBreaker", "duration")),
        # components/platform/topology.py: the image pinned with its tag for the inventory and mirrors, the engine
        # named beside its params, and the broker's security contexts given whole (NVIDIA/topograph@v1.0.0:
        # docs/engines/k8s.md: a partial override is refused at admission).
        ("topograph", ("image", "repository")),
        # components/platform/dra.py: both DRA drivers' images pinned with their tags (inventory, mirrors).
        ("dranet", ("image", "repository")),
        ("dra-driver-nvidia-gpu", ("image", "repository")),
        ("topograph", ("engine", "name")),
        ("topograph", ("nodeDataBroker", "podSecurityContext", "seccompProfile", "type")),
    }
    for pkg in rendered(stack).packages:
        if pkg["kind"] != "helm":
            continue
        if pkg["name"] in UNCHECKED:
            continue
        chart = chart_values(pkg["name"])
        for path in leaf_paths(pkg["values"]):
            node, ours = chart, pkg["values"]
            for k in path:
                node = node.get(k) if isinstance(node, dict) else None
                ours = ours[k]
            if node == ours:
                assert (pkg["name"], path) in pinned, f"{pkg['name']}: {'.'.join(path)} restates the chart default"


# Charts that can deploy node-feature-discovery (both default it on): at most one may, or two NFD masters fight
# over the same node labels; a stack that installs neither (a managed GPU stack) runs none.
NFD_CHARTS = {"gpu-operator", "network-operator"}


@pytest.mark.parametrize("stack", STACKS)
def test_one_nfd_and_no_mpi_operator(stack, rendered):
    pkgs = rendered(stack).packages
    nfd = [p["name"] for p in pkgs if p["kind"] == "helm" and p["values"].get("nfd", {}).get("enabled")]
    assert len(nfd) == (1 if NFD_CHARTS & {p["name"] for p in pkgs} else 0), nfd
    assert not any("mpi-operator" in json.dumps(p) for p in pkgs)


@pytest.mark.parametrize(("stack", "enforce"), [("dev", "baseline"), ("prod-ib", "privileged")])
def test_training_namespace_pod_security(stack, enforce):
    ns = platform.training_namespaces(cfg(stack))[0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == enforce
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "baseline"


# ------------------------------------------------------------------------------ resource graph under mocks


def test_graph_parents_and_ordering(rendered):
    run = rendered("prod-ib").run
    by_urn = {r.urn: r for r in run.registrations}
    release = {r.name: r for r in regs(run, ":Release")}
    (ncp,) = regs(run, ":NicClusterPolicy")
    assert release["network-operator"].urn in ncp.dependencies, "CR before its CRD's release"
    for pool in regs(run, ":IPPool"):
        assert ncp.urn in pool.dependencies, "IPPool CRD comes from the operator reconciling nvIpam"
    for q in regs(run, ":Queue"):
        assert release["volcano"].urn in q.dependencies
    for r in regs(run, ":SriovNetworkNodePolicy") + regs(run, ":SriovIBNetwork") + regs(run, ":SriovNetworkPoolConfig"):
        assert release["network-operator"].urn in r.dependencies
        # The NicClusterPolicy reaches `ready` (what it is awaited for) only while no node reboots: the SR-IOV
        # firmware rewrite and reboots come after it (network-operator@v26.4.1 state_skel.go isDaemonSetReady).
        assert ncp.urn in r.dependencies
    (pool,) = regs(run, ":SriovNetworkPoolConfig")
    for r in regs(run, ":SriovNetworkNodePolicy"):
        assert pool.urn in r.dependencies, "the pool's drain limit and RDMA mode before any policy reboots a node"
    namespaces = {r.inputs["metadata"]["name"]: r.urn for r in regs(run, ":Namespace")}
    for r in regs(run, ":SriovIBNetwork"):
        assert namespaces[r.inputs["metadata"]["namespace"]] in r.dependencies, "network CR before its namespace"
    # prod-ib's hosts carry DOCA-OFED (and load rpcrdma themselves): the policy's readiness says nothing about
    # NFS over RDMA there, so storage does not wait for it (with the operator's DOCA driver it does: below).
    assert ncp.urn not in release["csi-driver-nfs"].dependencies
    # With the gang flag the operator exits while Volcano's PodGroup CRD is missing: every object of the
    # overlay (the Deployment included) waits for the Volcano release. The provider builds and creates them only
    # once the Directory is registered, which the SDK holds back until its dependencies exist.
    (directory,) = regs(run, "kustomize/v2:Directory")
    assert release["volcano"].urn in directory.dependencies
    top_level = {"fastpath:platform:Platform", "fastpath:jobs:TrainingJob", "fastpath:verify:FabricAcceptance"}
    for r in run.registrations:
        if r.type not in top_level:
            assert r.parent in by_urn, f"{r.type} {r.name} is not parented to a fastpath component"
    # The job object itself (not only its component) waits for the platform: its CRD, queue and claim.
    for job in regs(run, ":PyTorchJob") + regs(run, ":MPIJob"):
        assert release["volcano"].urn in job.dependencies
        assert any(d.endswith("persistentvolumeclaim-training-checkpoints") for d in job.dependencies)
    (sc,) = regs(run, ":StorageClass")
    assert release["csi-driver-nfs"].urn in sc.dependencies


def test_profile_is_plain_serializable_data(rendered):
    profile = rendered("prod-roce").run.outputs["profile"]
    assert json.loads(json.dumps(profile)) == profile
    assert profile["transport"] == "roce"
    assert profile["ncclEnv"]["NCCL_IB_TC"] == "106"
    assert [r["network"] for r in profile["rails"]] == ["rail0-shared", "rail1-shared"]


# (stack, package, exactly what it waits for)
WAITS = [
    ("prod-ib", "csi-driver-nfs", []),
    ("prod-ib", "gpu-operator", ["Namespace/gpu-operator"]),
    ("prod-ib", "network-operator", ["Namespace/nvidia-network-operator"]),
    ("prod-ib", "volcano", ["Namespace/volcano-system"]),
    ("prod-ib", "training-operator", ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow", "helm/volcano"]),
    ("dev", "csi-driver-nfs", []),
    ("dev", "training-operator", ["ConfigMap/kubeflow/training-operator-init-container", "Namespace/kubeflow", "helm/volcano"]),
]


@pytest.mark.parametrize(("stack", "name", "waits"), WAITS, ids=[f"{w[0]}:{w[1]}" for w in WAITS])
def test_packages_record_what_each_install_waits_for(stack, name, waits, rendered):
    """packages.yaml shows the order `pulumi up` follows: each install's own dependencies and those of the
    components above it, by the names a reviewer knows."""
    (pkg,) = [p for p in rendered(stack).packages if p["name"] == name]
    assert pkg["waitsFor"] == waits


def test_waits_for_includes_what_a_parent_component_waits_for():
    """A dependency given to a component (not to the install itself) is inherited: the engine holds back the
    component's children only through their own dependencies, so the renderer walks up the parents."""
    import pulumi

    from tools import render

    def program():
        class Box(pulumi.ComponentResource):
            def __init__(self, name, opts=None):
                super().__init__("fastpath:test:Box", name, None, opts)

        from components import k8s

        first = k8s.apply(k8s.namespace("first", "t", "t", "baseline", "test"))
        box = Box("box", pulumi.ResourceOptions(depends_on=[first]))
        k8s.helm_release("inner", "c", "https://example.invalid", "1.0.0", "first", {}, pulumi.ResourceOptions(parent=box))

    run = render.run_program("dev", program=program)
    (pkg,) = render.packages(run)
    assert pkg["waitsFor"] == ["Namespace/first"]


def test_nfs_over_rdma_waits_for_the_operators_doca_driver():
    """With the operator's DOCA driver, rpcrdma is loaded by its container (ENABLE_NFSRDMA,
    Mellanox/network-operator@v26.4.1 docs/mofed-container-env-vars.md), so csi-driver-nfs, whose controller
    mounts the share itself (kubernetes-csi/csi-driver-nfs@v4.13.4 pkg/nfs/controllerserver.go CreateVolume),
    waits until the NicClusterPolicy is ready."""
    from tools import render

    p = stack_platform("prod-ib")
    p["gpu"] = {**p["gpu"], "hostMofed": False}
    run = render.run_program("prod-ib", extra_config={"fastpath:platform": p})
    (pkg,) = [x for x in render.packages(run) if x["name"] == "csi-driver-nfs"]
    assert pkg["waitsFor"] == ["NicClusterPolicy/nic-cluster-policy"]


def test_the_exported_env_of_an_nvlink_cluster_leaves_mnnvl_to_pods_with_a_channel(rendered):
    """A pod wired from the exported profile has no IMEX channel: NCCL's automatic MNNVL would find the clique and
    abort init ("available but not working", NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc ncclMnnvlCheck), so the env other
    stacks read says the network, as the cluster-wide runtimes do."""
    assert rendered("prod-gb200").run.outputs["profile"]["ncclEnv"]["NCCL_MNNVL_ENABLE"] == "0"
    assert "NCCL_MNNVL_ENABLE" not in rendered("prod-ib").run.outputs["profile"]["ncclEnv"]
