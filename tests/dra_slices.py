"""Fake ResourceSlices of one 8-GPU Hopper node (DGX/HGX H100/H200 layout), for tests/dra_allocator_v134.py. Device
names and attribute names are the ones the drivers publish at their tags: kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1
(G: below) and kubernetes-sigs/dranet@v1.4.0 (D: below); the slice shape follows the captured slices in
kubernetes-sigs/dranet@v1.4.0:examples/aws_eks_examples/gpu-efa/resourceslice-{gpu,dranet}.yaml.

Layout (dual-socket Sapphire/Emerald Rapids): 8 PCIe switches, each under its own root bus, each with 1 GPU and the
single-port compute ConnectX-7 for that GPU; GPUs 0-3 and their NICs on NUMA 0, 4-7 on NUMA 1. Two dual-port
ConnectX-7 for storage and in-band management sit on two more roots without a GPU. The compute NICs' PCI addresses,
netdevs and RDMA names are the DGX H100 User Guide's Table 6 (/work/shared/reference/topology.md §1: ibp24s0 is bus
0x18, mlx5_0, and so on); mlx5_1/2 and mlx5_7/8 being the storage cards is that note's inference, and their bus
numbers (0x29, 0xaa) are chosen to fall where that enumeration order puts them. The GPU bus IDs are the DGX H100's
as I recall them; the root bus names (pci0000:15, ...) are illustrative, picked below each device's bus. Any value
a test depends on is only its structure: one GPU and one compute NIC per root, storage NICs on roots of their own.

What dranet publishes about the RDMA device: D:pkg/inventory/db.go addRDMAAttributes sets dra.net/rdma on every
device and dra.net/rdmaDevice (the mlx5_N name) only on a device with no netdev. A ConnectX-7 whose port has a netdev
(Ethernet/RoCE, or IPoIB with the default --move-ib-interfaces=true: discoverNetworkInterfaces associates the ipoib
link with its PCI device) gets dra.net/ifName and no attribute naming mlx5_N; dranet resolves it only when preparing
the pod (pkg/driver/dra_hooks.go, inventory.GetRdmaDevice) and writes only interfaceName, hardwareAddress and IPs to
the claim status (pkg/driver/nri_hooks.go). hgx_h200(ib_only=True) gives what --move-ib-interfaces=false publishes
for IB ports: rdmaDevice and no link attributes. So HCA_OF below is this layout's knowledge, not the slice's."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

GPU_DRIVER = "gpu.nvidia.com"  # G:cmd/gpu-kubelet-plugin/main.go
NIC_DRIVER = "dra.net"  # D:cmd/dranet/app.go driverName
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # k8s.io/dynamic-resource-allocation deviceattribute (standard)
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"


@dataclass(frozen=True)
class Nic:
    """One ConnectX-7 PCI function: its address, RDMA device name, netdev, and whether it is a compute NIC."""

    pci: str
    hca: str
    netdev: str
    compute: bool

    @property
    def device(self) -> str:
        """dranet's device name: "pci-" and the address with ":" and "." as "-" (D:pkg/names/names.go
        NormalizePCIAddress)."""
        return "pci-" + self.pci.replace(":", "-").replace(".", "-")


@dataclass(frozen=True)
class Root:
    """One PCIe root bus: its resource.kubernetes.io/pcieRoot value, NUMA node, the GPU (minor, bus ID) and NICs."""

    root: str
    numa: int
    gpu: tuple[int, str] | None
    nics: tuple[Nic, ...]


def _compute(root: str, numa: int, minor: int, gpu_bus: str, nic_bus: str, hca: str) -> Root:
    netdev = f"ibp{int(nic_bus, 16)}s0"
    return Root(root, numa, (minor, f"0000:{gpu_bus}:00.0"), (Nic(f"0000:{nic_bus}:00.0", hca, netdev, True),))


def _storage(root: str, numa: int, bus: str, hcas: tuple[str, str]) -> Root:
    ports = tuple(Nic(f"0000:{bus}:00.{f}", hca, f"enp{int(bus, 16)}s0f{f}np{f}", False) for f, hca in enumerate(hcas))
    return Root(root, numa, None, ports)


HGX_H200_ROOTS: tuple[Root, ...] = (
    _compute("pci0000:15", 0, 0, "1b", "18", "mlx5_0"),
    _storage("pci0000:26", 0, "29", ("mlx5_1", "mlx5_2")),
    _compute("pci0000:3d", 0, 1, "43", "40", "mlx5_3"),
    _compute("pci0000:4c", 0, 2, "52", "4f", "mlx5_4"),
    _compute("pci0000:5b", 0, 3, "61", "5e", "mlx5_5"),
    _compute("pci0000:97", 1, 4, "9d", "9a", "mlx5_6"),
    _storage("pci0000:a7", 1, "aa", ("mlx5_7", "mlx5_8")),
    _compute("pci0000:bd", 1, 5, "c3", "c0", "mlx5_9"),
    _compute("pci0000:cb", 1, 6, "d1", "ce", "mlx5_10"),
    _compute("pci0000:d9", 1, 7, "df", "dc", "mlx5_11"),
)
ROOT_OF_GPU = {f"gpu-{r.gpu[0]}": r.root for r in HGX_H200_ROOTS if r.gpu}
NIC_OF_GPU = {f"gpu-{r.gpu[0]}": r.nics[0].device for r in HGX_H200_ROOTS if r.gpu}
COMPUTE_NICS = tuple(n.device for r in HGX_H200_ROOTS for n in r.nics if n.compute)
STORAGE_NICS = tuple(n.device for r in HGX_H200_ROOTS for n in r.nics if not n.compute)
HCA_OF = {n.device: n.hca for r in HGX_H200_ROOTS for n in r.nics}
"""dranet device name -> RDMA device (mlx5_N): what NCCL_IB_HCA needs, and what a netdev NIC's slice does not say."""


def _s(value: str) -> dict:
    return {"string": value}


def gpu_device(node: str, minor: int, bus_id: str, root: str) -> dict:
    """A full GPU as G:cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.GetDevice publishes it: name gpu-<minor>,
    unqualified driver attributes (type, uuid, productName, brand, architecture, the three versions, addressingMode
    when known) plus the standard pciBusID and pcieRoot, and capacity memory. No NUMA and no index attribute."""
    attributes = {
        "type": _s("gpu"),
        "uuid": _s(f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/gpu-{minor}')}"),
        "productName": _s("NVIDIA H200"),
        "brand": _s("Nvidia"),
        "architecture": _s("Hopper"),
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.126.9"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "addressingMode": _s("HMM"),
        PCI_BUS_ID: _s(bus_id),
        PCIE_ROOT: _s(root),
    }
    return {"name": f"gpu-{minor}", "attributes": attributes, "capacity": {"memory": {"value": "143771Mi"}}}


def nic_device(nic: Nic, root: Root, ib_only: bool = False) -> dict:
    """A PCI NIC as D:pkg/inventory/db.go publishes it (all names under dra.net/ but pcieRoot): discoverPCIDevices
    (pciAddress, pciVendor, pciDevice, numaNode, pcieRoot), addLinkAttributes when it has a netdev (ifName, mac,
    mtu, encapsulation, alias, state, type, ebpf, sriov, virtual), addRDMAAttributes (rdma; rdmaDevice only without
    a netdev). pciSubsystem, addresses and MACs are left out (values not knowable here)."""
    attributes: dict[str, dict] = {
        "dra.net/pciAddress": _s(nic.pci),
        "dra.net/pciVendor": _s("Mellanox Technologies"),
        "dra.net/pciDevice": _s("MT2910 Family [ConnectX-7]"),
        "dra.net/numaNode": {"int": root.numa},
        PCIE_ROOT: _s(root.root),
        "dra.net/rdma": {"bool": True},
    }
    ipoib = nic.compute
    if ib_only and ipoib:
        attributes["dra.net/rdmaDevice"] = _s(nic.hca)
        return {"name": nic.device, "attributes": attributes}
    attributes |= {
        "dra.net/ifName": _s(nic.netdev),
        "dra.net/mtu": {"int": 4092 if ipoib else 9000},
        "dra.net/encapsulation": _s("infiniband" if ipoib else "ether"),
        "dra.net/alias": _s(""),
        "dra.net/state": _s("up"),
        "dra.net/type": _s("ipoib" if ipoib else "device"),
        "dra.net/ebpf": {"bool": False},
        "dra.net/sriov": {"bool": False},
        "dra.net/virtual": {"bool": False},
    }
    return {"name": nic.device, "attributes": attributes}


def resource_slice(node: str, driver: str, devices: list[dict], suffix: str = "x0001") -> dict:
    """A ResourceSlice of pool <node> (both drivers name the pool after the node), generation 1, one slice."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-{suffix}"},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices},
    }


def hgx_h200(node: str, ib_only: bool = False) -> list[dict]:
    """The node's two ResourceSlices: gpu.nvidia.com with gpu-0..gpu-7 (in minor order here; G:cmd/gpu-kubelet-plugin/
    driver.go publishResources appends them while ranging over a Go map, so a real slice's order is arbitrary), and
    dra.net with the 12 ConnectX-7 functions sorted by device name (D:pkg/inventory/db.go scan sorts them). All
    storage/management ports are listed; dranet drops the default-gateway interface and its children, so on a node
    whose default route uses a bond of two of them those two would be missing."""
    gpus = [gpu_device(node, r.gpu[0], r.gpu[1], r.root) for r in HGX_H200_ROOTS if r.gpu]
    nics = sorted((nic_device(n, r, ib_only) for r in HGX_H200_ROOTS for n in r.nics), key=lambda d: d["name"])
    return [resource_slice(node, GPU_DRIVER, gpus), resource_slice(node, NIC_DRIVER, nics)]


GPU_CLASS: dict = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}
"""G:deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml rendered with resources.gpus.enabled and
the resource.k8s.io/v1 API (which adds extendedResourceName)."""

RDMA_NIC_CLASS: dict = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "fastpath-rdma-nic"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.net" && device.attributes["dra.net"].rdma == true'}}]},
}
"""The RDMA NIC class as fastpath would write it (dranet ships none; the name is a placeholder). Without the driver
test a GPU would make the selector a CEL error, not false (a missing attribute is an error, and `&&` only absorbs it
when its other side is false); every dra.net device has dra.net/rdma (addRDMAAttributes)."""

DEVICE_CLASSES = [GPU_CLASS, RDMA_NIC_CLASS]
