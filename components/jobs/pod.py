"""One GPU pod of a job: fabric wiring, GPU placement, /dev/shm, checkpoints, files and datasets, the gang
scheduler, and the preflight (components/jobs/preflight.sh) with the environment it checks the pod against. The
Training Operator v1 builders wrap pod_template; the Trainer v2 runtimes take the preflight environment and the
primary-interface annotation from here too."""

from __future__ import annotations

from components import k8s, versions
from components.fabric import dra, nccl
from components.fabric import wiring as fabric
from components.jobs import telemetry
from components.jobs import topology as job_topology
from components.jobs.files import FILES_MOUNT, files_configmap_name
from components.jobs.launch import DRA_HCA, IMEX_CHECK
from components.jobs.resolve import COMPONENT, JOB_LABEL, ROLE_LABEL, Resolved, job_labels
from components.model.profile import Profile
from components.platform import mirrors

CONTAINER = {"pytorch": "pytorch", "mpi": "worker", "tensorflow": "tensorflow"}  # pytorch/tensorflow: required


def env_list(r: Resolved) -> list[dict]:
    out: list[dict] = [{"name": k, "value": v} for k, v in r.env.items()]
    out += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for k, s in r.spec.secret_env.items()
    ]
    return out


def claim_nics(r: Resolved) -> list[dict]:
    """How many NICs dra_hca.sh must find (the claim's), where it runs."""
    claim = r.wiring.claim
    return [{"name": "FASTPATH_CLAIM_NICS", "value": str(claim.nics)}] if claim is not None and claim.paired else []


def pod_template(r: Resolved, command: list[str], role: str = "worker", preflight_in_main: bool = False) -> dict:
    """A GPU pod of this job: fabric wiring, GPU placement, shm, checkpoints, datasets, gang scheduler, and the
    preflight: an init container, or with `preflight_in_main` the first step of the main container (for
    ExitCode replicas, whose operator reads only the main container's exit code)."""
    spec, prof = r.spec, r.profile
    if r.wiring.hcas_at_start:
        # Its HCAs from the NICs its claim gave, paired with its GPUs, before anything uses them.
        command = ["sh", "-c", DRA_HCA, "fastpath-hca", *command]
    if r.wiring.imex_template is not None:
        # Multi-node NVLink: the IMEX channel and the GPUs' fabric checked before anything else runs.
        command = ["sh", "-c", IMEX_CHECK, "fastpath-imex", *command]
    limits: dict = {"nvidia.com/gpu": r.gpus, "memory": f"{r.memory_gib}Gi", "cpu": r.cpus}
    container: dict = {
        "name": CONTAINER[spec.framework],
        "image": spec.image,
        "command": command,
        "env": env_list(r),
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    wired = [container]
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{r.shm_gib}Gi"}}]
    if r.checkpoint_dir:
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": r.checkpoint_dir, "subPath": spec.name})
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": r.checkpoint_claim}})
    if spec.files:
        container["volumeMounts"].append({"name": "files", "mountPath": FILES_MOUNT, "readOnly": True})
        volumes.append({"name": "files", "configMap": {"name": files_configmap_name(spec)}})
    for i, d in enumerate(spec.datasets):
        container["volumeMounts"].append({"name": f"dataset-{i}", "mountPath": d.mount_path, "readOnly": True})
        volumes.append({"name": f"dataset-{i}", "persistentVolumeClaim": {"claimName": d.claim, "readOnly": True}})
    job_selector = {"matchLabels": {JOB_LABEL: spec.name, ROLE_LABEL: "worker"}}
    pod: dict = {
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": {k8s.GPU_PRODUCT_LABEL: prof.gpu.product},
        "tolerations": [k8s.toleration(prof.gpu.taint_key)],
        "affinity": {
            # One pod per node: each pod owns its node's GPUs and rails.
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": job_selector, "topologyKey": "kubernetes.io/hostname"}
                ]
            },
            # Packed toward one topology domain (zone, rack or leaf): fewer switch hops between ranks.
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": job_selector, "topologyKey": affinity_key(r)},
                    }
                ]
            },
        },
    }
    if prof.gpu.clique_nodes:
        # Multi-node NVLink reaches only the nodes of one clique (NCCL matches ranks by clusterUuid and cliqueId:
        # NVIDIA/nccl@v2.30.7-1 src/mnnvl.cc), so the whole job shares one. The first pod matches its own term.
        pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = [
            {"labelSelector": job_selector, "topologyKey": dra.CLIQUE_LABEL}
        ]
    if r.scheduler == "volcano":
        pod["schedulerName"] = r.scheduler  # Kueue's pods keep the default scheduler: Kueue admits the job
    if r.priority_class:
        pod["priorityClassName"] = r.priority_class
    if has_preflight(r):
        volumes.append({"name": "preflight", "configMap": {"name": r.preflight.config_map}})
        if preflight_in_main:
            container["env"] += [
                {"name": "FASTPATH_PREFLIGHT", "value": preflight_script(r)},
                *({"name": k, "value": v} for k, v in preflight_env(r).items()),
            ]
            container["volumeMounts"].append({"name": "preflight", "mountPath": "/fastpath", "readOnly": True})
            container["terminationMessagePolicy"] = "FallbackToLogsOnError"
        else:
            pod["initContainers"] = [preflight_container(r, limits)]
            wired += pod["initContainers"]
    container["env"] += claim_nics(r)
    metadata: dict = {"labels": job_labels(r, role)}
    if notes := {**primary_interface_annotation(r), **kueue_placement(r)}:
        metadata["annotations"] = notes
    out = {"metadata": metadata, "spec": pod}
    fabric.wire_pod(r.wiring, out, wired)
    telemetry.wire(
        pod, [container], prof.nccl_inspector_image, mirrors.under(versions.OPS_PYTHON_IMAGE, prof.image_mirror)
    )
    return out


def affinity_key(r: Resolved) -> str:
    """The label whose domain the job's pods prefer to share: its placement level's, else the platform's."""
    topology = r.profile.nodes.topology
    if r.placement is not None and topology is not None:
        return topology.key(r.placement.level)
    return r.profile.nodes.affinity_key


def compute_domain(r: Resolved) -> dict | None:
    """A v1 job's ComputeDomain on a multi-node NVLink cluster (its IMEX channel); None elsewhere."""
    if r.wiring.imex_template is None:
        return None
    meta = k8s.meta(
        r.spec.name, r.profile.cluster, COMPONENT, namespace=r.namespace, extra_labels={JOB_LABEL: r.spec.name}
    )
    return dra.compute_domain(r.wiring.imex_template, meta)


def fabric_claim_template(r: Resolved) -> dict | None:
    """A v1 job's ResourceClaimTemplate on a `dra` fabric: each of its pods claims its GPUs and rail NICs from it
    (components/fabric/dra.py); None elsewhere, and for a TrainJob (its namespace's template serves it)."""
    claim = r.wiring.claim
    if claim is None or r.api == "v2":
        return None
    meta = k8s.meta(
        claim.template, r.profile.cluster, COMPONENT, namespace=r.namespace, extra_labels={JOB_LABEL: r.spec.name}
    )
    return dra.claim_template(claim, meta)


def kueue_placement(r: Resolved) -> dict[str, str]:
    """Kueue's Topology Aware Scheduling annotations of the job's pod templates; a TFJob's chief and workers are
    two podsets, grouped so they share the domain."""
    topology = r.profile.nodes.topology
    if r.scheduler != "kueue" or r.placement is None or topology is None:
        return {}
    group = "chief-and-workers" if r.spec.framework == "tensorflow" and r.replicas > 1 else None
    return job_topology.kueue_annotations(r.placement, topology, group)


def host_network(pod: dict) -> None:
    """A pod spec on the node's network (components/fabric/wiring.py HOST_NETWORK_POD says why the DNS policy)."""
    pod.update(fabric.HOST_NETWORK_POD)


def primary_interface_annotation(r: Resolved) -> dict[str, str]:
    """A pod whose primary interface is not eth0 (fabric.podInterface) says so, so the policy pack judges
    NCCL_SOCKET_IFNAME against the interfaces the pod has."""
    return primary_interface(r.profile)


def primary_interface(profile: Profile) -> dict[str, str]:
    iface = profile.fabric.pod_interface
    return {} if iface == "eth0" else {nccl.PRIMARY_INTERFACE_ANNOTATION: iface}


def has_preflight(r: Resolved) -> bool:
    return bool(r.spec.preflight and r.profile.preflight and r.wiring.capabilities)


def preflight_script(r: Resolved) -> str:
    return f"/fastpath/{r.preflight.key}"


def preflight_env(r: Resolved) -> dict[str, str]:
    """What components/jobs/preflight.sh checks this pod for."""
    return pod_preflight_env(r.profile, r.wiring, r.gpus, r.shm_gib)


def pod_preflight_env(profile: Profile, wiring: fabric.PodWiring, gpus: int, shm_gib: int) -> dict[str, str]:
    fab = profile.fabric
    rdma_devices = sum(wiring.resources.values()) + (wiring.claim.nics if wiring.claim is not None else 0)
    hcas = " ".join(fabric.visible_hcas(fab, list(wiring.rails), wiring.claim))
    env = {"PREFLIGHT_GPUS": str(gpus), "PREFLIGHT_RDMA_DEVICES": str(rdma_devices), "PREFLIGHT_HCAS": hcas}
    # (A `dra` pod with part of a node learns its HCAs at start: components/jobs/dra_hca.sh exports them.)
    if (hcas or wiring.hcas_at_start) and (layer := fab.kind_row.link_layer) is not None:
        env["PREFLIGHT_LINK_LAYER"] = layer
    # The interfaces whose addresses NCCL uses on the rails: the pod's own (net1..), or on the host network, where
    # GIDs are addresses (RoCE), the node's rail netdevs, whose IPv4 addresses are the GIDs NCCL picks (without one
    # it falls back to the link-local GID 0, which does not route between leaves). InfiniBand verbs need no rail
    # address.
    rail_ifaces = list(wiring.interfaces)
    if wiring.host_network and fab.kind_row.gid_from_address:
        rail_ifaces = [rail.host_interface for rail in wiring.rails if rail.host_interface]
    env.update({"PREFLIGHT_INTERFACES": " ".join(rail_ifaces), "PREFLIGHT_SHM_BYTES": str(shm_gib * 2**30)})
    if wiring.host_network:
        env["PREFLIGHT_BOOTSTRAP"] = fab.pod_interface
    if fab.kind_row.gid_from_address and hcas and rail_ifaces:
        # On a shared RoCE port the pod's own address must be in the HCA's GID table for NCCL to pick it.
        env["PREFLIGHT_ROCE_GIDS"] = " ".join(
            f"{iface}:{rail.hca}" for iface, rail in zip(rail_ifaces, wiring.rails, strict=True)
        )
    return env


def preflight_container(r: Resolved, limits: dict) -> dict:
    """Checks the pod is on the fast path before the job starts. It requests the same GPUs and rail devices (the
    kubelet hands an init container's devices on to the app container; fabric.wire_pod adds the fabric's) and
    little memory."""
    small = {**limits, "memory": "256Mi", "cpu": 1}
    return {
        "name": "preflight",
        "image": r.spec.image,
        "command": ["sh", preflight_script(r)],
        "env": [{"name": k, "value": v} for k, v in preflight_env(r).items()],
        "resources": {"limits": small, "requests": dict(small)},
        # The reason a check failed, in the pod's status (kubectl describe), not only in its logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "preflight", "mountPath": "/fastpath", "readOnly": True},
        ],
    }
