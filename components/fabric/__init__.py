"""The fabric model: what a cluster's network is and how a pod is wired onto it. Pure data and functions, no
Pulumi; everything per fabric kind or attachment is a row of kinds.py or a `match` ending in `assert_never`.

    kinds       one row per fabric kind and per attachment (nothing else names one by string)
    nccl        the NCCL variables NCCL reads (vendored catalogue in data/)
    addressing  NV-IPAM blocks per node, the pod's interface names
    wiring      a pod's fabric wiring: NCCL env, RDMA resources, Multus networks
"""
