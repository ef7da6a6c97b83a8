"""The Kubernetes 1.34 DRA allocator (tests/dra_allocator_v134.py restates it) on the fake ResourceSlices of one 8-GPU
Hopper node (tests/dra_slices.py): which GPU/NIC claims fit, which GPUs and NICs they get, and which fail or abort.
Every case says which upstream behaviour it shows; the citations are in the model."""

import copy
from collections.abc import Collection
from typing import TypeVar

import pytest

from tests import dra_allocator_v134 as dra
from tests import dra_slices as ds
from tests.dra_allocator_v134 import AllocationError, InvalidClaim

NODE = "dgx-01"
SLICES = ds.hgx_h200(NODE)
GPU, NIC = ds.GPU_CLASS["metadata"]["name"], ds.RDMA_NIC_CLASS["metadata"]["name"]
GPUS = tuple(f"gpu-{i}" for i in range(8))
ALL_NICS = tuple(sorted(ds.COMPUTE_NICS + ds.STORAGE_NICS))


def exactly(name: str, device_class: str, count: int = 1, mode: str = "ExactCount", *selectors: str) -> dict:
    spec: dict = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        spec["count"] = count
    if selectors:
        spec["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": spec}


def claim(requests: list[dict], *constraints: dict) -> dict:
    return {"devices": {"requests": requests, "constraints": list(constraints)}}


def aligned(*requests: str, attribute: str = ds.PCIE_ROOT) -> dict:
    """matchAttribute over `requests`; none: over every request of the claim."""
    return {"matchAttribute": attribute, **({"requests": list(requests)} if requests else {})}


def pairs(n: int, scoped: bool = True) -> dict:
    """n request pairs gpu-i/nic-i, each pair under its own pcieRoot constraint (scoped) or all under one."""
    requests = [r for i in range(n) for r in (exactly(f"gpu-{i}", GPU), exactly(f"nic-{i}", NIC))]
    constraints = [aligned(f"gpu-{i}", f"nic-{i}") for i in range(n)] if scoped else [aligned()]
    return claim(requests, *constraints)


def gpus(*names: str) -> set[tuple[str, str, str]]:
    return {(ds.GPU_DRIVER, NODE, n) for n in names}


def nics(*names: str) -> set[tuple[str, str, str]]:
    return {(ds.NIC_DRIVER, NODE, n) for n in names}


T = TypeVar("T")


def must(value: T | None) -> T:
    assert value is not None
    return value


def run(spec: dict, allocated: Collection[tuple[str, str, str]] = frozenset(), slices: list[dict] = SLICES) -> list[dict] | None:
    return dra.allocate(spec, ds.DEVICE_CLASSES, slices, NODE, allocated)


def picked(results: list[dict] | None) -> dict[str, str] | None:
    return None if results is None else {r["request"]: r["device"] for r in results}


def device(slices: list[dict], name: str) -> dict:
    return next(d for s in slices for d in s["spec"]["devices"] if d["name"] == name)


def edited(edit, slices: list[dict] = SLICES) -> list[dict]:
    """A deep copy of `slices` after edit(copy)."""
    out = copy.deepcopy(slices)
    edit(out)
    return out


# --- Per-GPU pairs: one pcieRoot constraint per (gpu-i, nic-i) ------------------------------------------------------

PAIRS = [
    # (case, pairs, allocated, GPUs the pairs get in order, or None)
    ("4 pairs on a free node: GPUs 0-3 in slice order, each with the compute NIC on its root", 4, set(), GPUS[:4]),
    ("4 pairs with GPUs 0-3 held by another claim: GPUs 4-7 with their NICs", 4, gpus(*GPUS[:4]), GPUS[4:]),
    ("4 pairs with GPUs 0, 2, 4, 6 held: the odd ones", 4, gpus(*GPUS[::2]), GPUS[1::2]),
    ("4 pairs with gpu-0's NIC held: gpu-0 is tried first, its nic-0 fails, gpu-0's request moves on to gpu-1", 4, nics(ds.NIC_OF_GPU["gpu-0"]), GPUS[1:5]),
    ("8 pairs on a free node: all 8 GPU/NIC pairs", 8, set(), GPUS),
    ("8 pairs with one compute NIC held: its GPU has no NIC left on its root; the storage NICs do not help", 8, nics(ds.NIC_OF_GPU["gpu-3"]), None),
    ("8 pairs with one GPU held: 7 GPUs for 8 pairs", 8, gpus("gpu-5"), None),
    ("1 pair with every compute NIC held: 4 storage NICs free, none on a GPU's root", 1, nics(*ds.COMPUTE_NICS), None),
]


@pytest.mark.parametrize(("case", "n", "allocated", "want"), PAIRS, ids=[c[0][:60] for c in PAIRS])
def test_gpu_nic_pairs(case, n, allocated, want):
    if want is None:
        assert run(pairs(n), allocated) is None, case
        return
    got = must(picked(run(pairs(n), allocated)))
    assert [got[f"gpu-{i}"] for i in range(n)] == list(want), case
    for i in range(n):
        assert got[f"nic-{i}"] == ds.NIC_OF_GPU[got[f"gpu-{i}"]], case  # the NIC on the GPU's root
    assert not set(got.values()) & set(ds.STORAGE_NICS), case


def test_results_come_in_request_order():
    """Results are appended as the search picks them: request by request, in the claim's order."""
    got = must(run(pairs(2)))
    assert [(r["request"], r["driver"], r["pool"], r["device"]) for r in got] == [
        ("gpu-0", ds.GPU_DRIVER, NODE, "gpu-0"),
        ("nic-0", ds.NIC_DRIVER, NODE, ds.NIC_OF_GPU["gpu-0"]),
        ("gpu-1", ds.GPU_DRIVER, NODE, "gpu-1"),
        ("nic-1", ds.NIC_DRIVER, NODE, ds.NIC_OF_GPU["gpu-1"]),
    ]


def test_pairing_does_not_depend_on_device_or_pool_order():
    """The GPU driver lists its devices in Go map order and the allocator ranges over pools in Go map order: per-pair
    constraints give every GPU its own root's NIC whatever the order (which GPUs: the first free in slice order)."""

    def reverse_gpus(slices):
        next(s for s in slices if s["spec"]["driver"] == ds.GPU_DRIVER)["spec"]["devices"].reverse()

    for slices in (edited(reverse_gpus), SLICES[::-1], edited(reverse_gpus, SLICES[::-1])):
        got = must(picked(dra.allocate(pairs(4), ds.DEVICE_CLASSES, slices, NODE)))
        first = [d["name"] for s in slices if s["spec"]["driver"] == ds.GPU_DRIVER for d in s["spec"]["devices"]][:4]
        assert [got[f"gpu-{i}"] for i in range(4)] == first
        assert all(got[f"nic-{i}"] == ds.NIC_OF_GPU[got[f"gpu-{i}"]] for i in range(4))


def test_failing_search_is_exhaustive():
    """allocateOne backtracks through every order of choices before it gives up: the 8-pair claim with one NIC held
    fails only after ~10^5 steps (free node: one straight path)."""
    free = dra.new_search(pairs(8), ds.DEVICE_CLASSES, SLICES, NODE)
    assert dra.solve(free) and free.steps < 100
    stuck = dra.new_search(pairs(8), ds.DEVICE_CLASSES, SLICES, NODE, nics(ds.NIC_OF_GPU["gpu-3"]))
    assert not dra.solve(stuck) and stuck.steps > 100_000


# --- One constraint over the whole claim (no `requests`) ------------------------------------------------------------

WHOLE_CLAIM = [
    # (case, claim, result or None)
    ("4 GPUs + 4 NICs under one pcieRoot constraint: all 8 devices would need one root", claim([exactly("gpu", GPU, 4), exactly("nic", NIC, 4)], aligned()), None),
    ("4 pairs under one constraint without requests: same trap, request by request", pairs(4, scoped=False), None),
    ("dranet's demo shape, 2 GPUs + 2 NICs, no requests: no root has 2 GPUs here", claim([exactly("gpu", GPU, 2), exactly("nic", NIC, 2)], aligned()), None),
    ("1 GPU + 1 NIC under one constraint: the only size that fits this layout", claim([exactly("gpu", GPU), exactly("nic", NIC)], aligned()), {"gpu": "gpu-0", "nic": ds.NIC_OF_GPU["gpu-0"]}),
    ("4 GPUs + 4 NICs, constraint over the NICs only: 4 NICs on one root, and no root has more than 2", claim([exactly("gpu", GPU, 4), exactly("nic", NIC, 4)], aligned("nic")), None),
]


@pytest.mark.parametrize(("case", "spec", "want"), WHOLE_CLAIM, ids=[c[0][:60] for c in WHOLE_CLAIM])
def test_constraint_without_requests_covers_every_device(case, spec, want):
    assert picked(run(spec)) == want, case


def test_two_nics_on_one_root_are_the_storage_ports():
    """A constraint over one request compares that request's devices with each other: 2 RDMA NICs on one root exist
    only on a storage card (2 ports, 2 PCI functions), so "2 aligned NICs" gets storage ports, not compute NICs."""
    got = must(run(claim([exactly("nic", NIC, 2)], aligned("nic"))))
    assert [r["device"] for r in got] == list(ds.STORAGE_NICS[:2])


# --- A device without the constrained attribute ---------------------------------------------------------------------


def _drop_root_of_nic0(slices):
    del device(slices, ds.NIC_OF_GPU["gpu-0"])["attributes"][ds.PCIE_ROOT]  # dranet: "Could not get pci root attribute"


NO_ROOT = edited(_drop_root_of_nic0)


def test_nic_without_the_attribute_is_never_chosen_for_a_constrained_request():
    """matchAttributeConstraint.add refuses a device that lacks the attribute, even as the first of its set."""
    got = must(picked(run(pairs(4), slices=NO_ROOT)))
    assert [got[f"gpu-{i}"] for i in range(4)] == list(GPUS[1:5])
    assert ds.NIC_OF_GPU["gpu-0"] not in got.values()
    assert picked(run(claim([exactly("nic", NIC)], aligned("nic")), slices=NO_ROOT)) == {"nic": ds.STORAGE_NICS[0]}  # next by name


def test_nic_without_the_attribute_is_chosen_when_unconstrained():
    assert picked(run(claim([exactly("nic", NIC)]), slices=NO_ROOT)) == {"nic": ds.NIC_OF_GPU["gpu-0"]}


MATCH_ATTRIBUTE = [
    # (case, claim, fits)
    ("GPUs share productName: gpu.nvidia.com/productName finds the unqualified name (domain = driver)", claim([exactly("gpu", GPU, 8)], aligned("gpu", attribute="gpu.nvidia.com/productName")), True),
    ("2 GPUs on one pcieRoot: none here", claim([exactly("gpu", GPU, 2)], aligned("gpu")), False),
    ("GPU + NIC on one dra.net/numaNode: the GPU driver publishes no NUMA attribute", claim([exactly("gpu", GPU), exactly("nic", NIC)], aligned(attribute="dra.net/numaNode")), False),
    ("4 NICs on one dra.net/numaNode: the first four by name, two of them storage ports", claim([exactly("nic", NIC, 4)], aligned(attribute="dra.net/numaNode")), True),
    ("8 NICs on one dra.net/numaNode: 6 per socket", claim([exactly("nic", NIC, 8)], aligned(attribute="dra.net/numaNode")), False),
    ("productName qualified by another domain: not found", claim([exactly("gpu", GPU)], aligned(attribute="resource.kubernetes.io/productName")), False),
]


@pytest.mark.parametrize(("case", "spec", "fits"), MATCH_ATTRIBUTE, ids=[c[0][:60] for c in MATCH_ATTRIBUTE])
def test_match_attribute(case, spec, fits):
    assert (run(spec) is not None) == fits, case


# --- Attribute names and CEL ----------------------------------------------------------------------------------------

IB_ONLY = ds.hgx_h200(NODE, ib_only=True)
GPU0, NIC0 = device(SLICES, "gpu-0"), device(SLICES, ds.NIC_OF_GPU["gpu-0"])
STORAGE0 = device(SLICES, ds.STORAGE_NICS[0])

ATTRIBUTES = [
    # (device, name, driver, value)
    (GPU0, "gpu.nvidia.com/type", ds.GPU_DRIVER, "gpu"),
    (GPU0, "gpu.nvidia.com/type", None, None),  # published as `type`: found only through the driver's domain
    (GPU0, ds.PCIE_ROOT, ds.GPU_DRIVER, "pci0000:15"),
    (GPU0, "gpu.nvidia.com/pcieRoot", ds.GPU_DRIVER, None),  # the standard attribute has its own domain
    (GPU0, "gpu.nvidia.com/numaNode", ds.GPU_DRIVER, None),
    (NIC0, ds.PCIE_ROOT, ds.NIC_DRIVER, "pci0000:15"),
    (NIC0, "dra.net/rdma", ds.NIC_DRIVER, True),
    (NIC0, "dra.net/ifName", ds.NIC_DRIVER, "ibp24s0"),
    (NIC0, "dra.net/rdmaDevice", ds.NIC_DRIVER, None),  # a NIC with a netdev: nothing names mlx5_0
    (device(IB_ONLY, ds.NIC_OF_GPU["gpu-0"]), "dra.net/rdmaDevice", ds.NIC_DRIVER, "mlx5_0"),
    (device(IB_ONLY, ds.NIC_OF_GPU["gpu-0"]), "dra.net/ifName", ds.NIC_DRIVER, None),
    (NIC0, "dra.net/numaNode", ds.NIC_DRIVER, 0),
]


@pytest.mark.parametrize(("dev", "name", "driver", "want"), ATTRIBUTES, ids=[f"{d['name']}:{n}:{v}" for d, n, _, v in ATTRIBUTES])
def test_attribute(dev, name, driver, want):
    assert dra.attribute(dev, name, driver) == want


def test_no_attribute_names_the_rdma_device_of_a_netdev_nic():
    """NCCL_IB_HCA needs mlx5_N; dranet publishes it (rdmaDevice) only for a device without a netdev."""
    for slices, named in ((SLICES, set()), (IB_ONLY, set(ds.COMPUTE_NICS))):
        nic_slice = next(s for s in slices if s["spec"]["driver"] == ds.NIC_DRIVER)
        got = {d["name"]: dra.attribute(d, "dra.net/rdmaDevice") for d in nic_slice["spec"]["devices"]}
        assert {n for n, v in got.items() if v} == named
        assert all(got[n] == ds.HCA_OF[n] for n in named)
        values = {str(v.get("string")) for d in nic_slice["spec"]["devices"] for v in d["attributes"].values()}
        assert bool(values & set(ds.HCA_OF.values())) == bool(named)
    assert [ds.HCA_OF[ds.NIC_OF_GPU[g]] for g in GPUS] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


SELECTORS = [
    # (expression, device, driver, result, or AllocationError)
    ("device.attributes['gpu.nvidia.com'].type == 'gpu'", GPU0, ds.GPU_DRIVER, True),
    ('device.attributes["gpu.nvidia.com"].type == "gpu"', NIC0, ds.NIC_DRIVER, AllocationError),  # unknown domain: empty map, then no such key
    ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:15"', GPU0, ds.GPU_DRIVER, True),
    ('device.attributes["resource.kubernetes.io"]["pcieRoot"] in ["pci0000:3d", "pci0000:15"]', NIC0, ds.NIC_DRIVER, True),
    ('device.attributes["gpu.nvidia.com"]["resource.kubernetes.io/pcieRoot"] == "pci0000:15"', GPU0, ds.GPU_DRIVER, AllocationError),
    ('device.attributes["dra.net"].rdma == true', NIC0, ds.NIC_DRIVER, True),
    (ds.RDMA_NIC_CLASS["spec"]["selectors"][0]["cel"]["expression"], GPU0, ds.GPU_DRIVER, False),  # false && error = false
    ('device.attributes["dra.net"].rdma == true', GPU0, ds.GPU_DRIVER, AllocationError),
    (ds.GPU_CLASS["spec"]["selectors"][0]["cel"]["expression"], NIC0, ds.NIC_DRIVER, False),
    ('device.attributes["dra.net"].rdmaDevice == "mlx5_0"', NIC0, ds.NIC_DRIVER, AllocationError),  # a netdev NIC has none
    ('"rdmaDevice" in device.attributes["dra.net"] && device.attributes["dra.net"].rdmaDevice == "mlx5_0"', NIC0, ds.NIC_DRIVER, False),
    ('device.attributes["dra.net"]["ifName"] in ["ibp24s0", "ibp64s0"] && !(device.attributes["dra.net"].numaNode == 1)', NIC0, ds.NIC_DRIVER, True),
    ('device.attributes["dra.net"].numaNode != 0 || device.driver == "dra.net"', NIC0, ds.NIC_DRIVER, True),
    ('device.attributes["dra.net"].type == "ipoib"', STORAGE0, ds.NIC_DRIVER, False),
    ("device.driver", GPU0, ds.GPU_DRIVER, AllocationError),  # not a bool
]


@pytest.mark.parametrize(("expression", "dev", "driver", "want"), SELECTORS, ids=[f"{e[:50]}@{d['name']}" for e, d, _, _ in SELECTORS])
def test_selector(expression, dev, driver, want):
    if want is AllocationError:
        with pytest.raises(AllocationError):
            dra.selector_matches(expression, driver, dev)
    else:
        assert dra.selector_matches(expression, driver, dev) is want


def test_classes_select_their_devices():
    for cls, driver, names in ((ds.GPU_CLASS, ds.GPU_DRIVER, GPUS), (ds.RDMA_NIC_CLASS, ds.NIC_DRIVER, ALL_NICS)):
        expression = cls["spec"]["selectors"][0]["cel"]["expression"]
        hits = {d["name"] for s in SLICES for d in s["spec"]["devices"] if dra.selector_matches(expression, s["spec"]["driver"], d)}
        assert hits == set(names) and all(s["spec"]["driver"] == driver for s in SLICES if {d["name"] for d in s["spec"]["devices"]} & hits)


def by_hca(hca: str, guarded: bool = False) -> dict:
    expression = f'device.attributes["dra.net"].rdmaDevice == "{hca}"'
    return claim([exactly("nic", NIC, 1, "ExactCount", ('"rdmaDevice" in device.attributes["dra.net"] && ' if guarded else "") + expression)])


def test_request_selector_error_aborts_the_allocation():
    """Selectors run lazily, device by device in slice order, until a device fits; the first device that lacks
    rdmaDevice makes the unguarded selector a CEL error, and the whole allocation fails with it. On netdev slices that
    is the first NIC. On IB-only slices mlx5_0 is found first, but mlx5_3 lies behind the storage ports (Ethernet,
    with a netdev, so no rdmaDevice): an error again. Guarded with `in`, it works on both."""
    with pytest.raises(AllocationError):
        run(by_hca("mlx5_0"))
    assert picked(run(by_hca("mlx5_0"), slices=IB_ONLY)) == {"nic": ds.NIC_OF_GPU["gpu-0"]}
    with pytest.raises(AllocationError):
        run(by_hca("mlx5_3"), slices=IB_ONLY)
    assert picked(run(by_hca("mlx5_3", guarded=True), slices=IB_ONLY)) == {"nic": ds.NIC_OF_GPU["gpu-1"]}
    assert run(by_hca("mlx5_3", guarded=True)) is None


def test_class_selectors_run_before_request_selectors():
    """isSelectable: a device the class refuses never reaches the request's selectors (which would fail on a GPU)."""
    spec = claim([exactly("nic", NIC, 2, "ExactCount", 'device.attributes["dra.net"].numaNode == 1')])
    assert picked(run(spec)) is not None


# --- Counts, All, limits --------------------------------------------------------------------------------------------

COUNTS = [
    # (case, claim, allocated, devices in result order, None, or an exception)
    ("8 GPUs: all of them", claim([exactly("gpu", GPU, 8)]), set(), list(GPUS)),
    ("9 GPUs: more than the node has", claim([exactly("gpu", GPU, 9)]), set(), None),
    ("8 GPUs with one held", claim([exactly("gpu", GPU, 8)]), gpus("gpu-0"), None),
    ("33 GPUs: above 32 devices per claim, an error before searching", claim([exactly("gpu", GPU, 33)]), set(), AllocationError),
    ("All GPUs: every GPU the class selects, in slice order", claim([exactly("gpu", GPU, mode="All")]), set(), list(GPUS)),
    ("All GPUs with one held by another claim: no solution", claim([exactly("gpu", GPU, mode="All")]), gpus("gpu-5"), None),
    ("All RDMA NICs: 8 compute + 4 storage, in name order", claim([exactly("nic", NIC, mode="All")]), set(), list(ALL_NICS)),
    ("All NICs on NUMA 1 (request selector)", claim([exactly("nic", NIC, 1, "All", 'device.attributes["dra.net"].numaNode == 1')]), set(), [n for n in ALL_NICS if n > "pci-0000-9"]),
    ("All GPUs matching nothing: All needs at least one device", claim([exactly("gpu", GPU, 1, "All", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'")]), set(), None),
    ("All NICs on one pcieRoot: a constraint refusing an All device is an error", claim([exactly("nic", NIC, mode="All")], aligned("nic")), set(), AllocationError),
    ("All GPUs + All NICs: 20 devices", claim([exactly("gpu", GPU, mode="All"), exactly("nic", NIC, mode="All")]), set(), list(GPUS) + list(ALL_NICS)),
    ("unknown device class: an error", claim([exactly("gpu", "no-such-class")]), set(), AllocationError),
    ("33 constraints: the apiserver refuses the claim", claim([exactly("gpu", GPU)], *[aligned("gpu")] * 33), set(), InvalidClaim),
    ("33 requests: the apiserver refuses the claim", claim([exactly(f"g{i}", GPU) for i in range(33)]), set(), InvalidClaim),
    ("17 pairs: 34 requests", pairs(17), set(), InvalidClaim),
    ("matchAttribute without a domain", claim([exactly("gpu", GPU)], aligned(attribute="pcieRoot")), set(), InvalidClaim),
]


@pytest.mark.parametrize(("case", "spec", "allocated", "want"), COUNTS, ids=[c[0][:60] for c in COUNTS])
def test_counts_and_all(case, spec, allocated, want):
    if isinstance(want, type):
        with pytest.raises(want):
            run(spec, allocated)
        return
    got = run(spec, allocated)
    assert (None if got is None else [r["device"] for r in got]) == want, case


def test_thirty_two_devices_fit():
    """32 devices per claim is allowed: 4 nodes' worth of GPUs in one pool (allNodes, as a network-attached driver)."""
    many = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(40)]
    pool = {"spec": {"driver": ds.GPU_DRIVER, "allNodes": True, "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1}, "devices": many}}
    assert len(must(run(claim([exactly("gpu", GPU, 32)]), slices=[pool]))) == 32
    with pytest.raises(AllocationError):
        run(claim([exactly("gpu", GPU, 30), exactly("more", GPU, 3)]), slices=[pool])


# --- firstAvailable -------------------------------------------------------------------------------------------------


def first_available(name: str, *subs: tuple[str, int]) -> dict:
    return {"name": name, "firstAvailable": [{"name": s, "deviceClassName": GPU, "count": c} for s, c in subs]}


def test_first_available_takes_the_first_sub_request_that_fits():
    spec = claim([first_available("gpus", ("eight", 8), ("four", 4))])
    assert [(r["request"], r["device"]) for r in must(run(spec))] == [("gpus/eight", g) for g in GPUS]
    got = must(run(spec, gpus("gpu-0", "gpu-1")))
    assert [(r["request"], r["device"]) for r in got] == [("gpus/four", g) for g in GPUS[2:6]]


def test_constraint_naming_the_parent_covers_its_sub_requests():
    """A constraint naming `gpus` applies to whichever sub-request is chosen: 2 GPUs cannot share a root, so the
    search falls back to `one`, paired with a NIC on its root (gpu-0's NIC is held: gpu-1 and its NIC). Naming
    `gpus/two` leaves `gpus/one` out of the constraint: the NIC is then the first free one, a storage port."""
    held = nics(ds.NIC_OF_GPU["gpu-0"])
    spec = claim([first_available("gpus", ("two", 2), ("one", 1)), exactly("nic", NIC)], aligned("gpus", "nic"))
    assert picked(run(spec, held)) == {"gpus/one": "gpu-1", "nic": ds.NIC_OF_GPU["gpu-1"]}
    named = claim([first_available("gpus", ("two", 2), ("one", 1)), exactly("nic", NIC)], aligned("gpus/two", "nic"))
    assert picked(run(named, held)) == {"gpus/one": "gpu-0", "nic": ds.STORAGE_NICS[0]}


# --- Which slices count for the node --------------------------------------------------------------------------------


def _older_gpu_slice() -> dict:
    old = copy.deepcopy(SLICES[0])
    old["spec"]["pool"]["generation"] = 0
    old["spec"]["devices"] = [dict(old["spec"]["devices"][0], name="gpu-9")]
    return old


def _newer_gpu_slice() -> dict:
    new = _older_gpu_slice()
    new["spec"]["pool"]["generation"] = 2
    return new


def _incomplete(slices: list[dict]) -> None:
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 2


def _duplicate(slices: list[dict]) -> None:
    slices[0]["spec"]["devices"].append(copy.deepcopy(slices[0]["spec"]["devices"][0]))


POOLS = [
    # (case, edit of the slices, claim, devices, None, or an exception)
    ("slices of another node are not this node's", lambda s: [x["spec"].update(nodeName="dgx-02") for x in s], claim([exactly("gpu", GPU)]), None),
    ("an allNodes slice counts on every node", lambda s: [x["spec"].update(nodeName=None, allNodes=True) for x in s], claim([exactly("gpu", GPU)]), ["gpu-0"]),
    ("perDeviceNodeSelection slices are skipped (partitionable devices off)", lambda s: s[0]["spec"].update(nodeName=None, perDeviceNodeSelection=True), claim([exactly("gpu", GPU)]), None),
    ("a slice with no node field is skipped", lambda s: s[0]["spec"].pop("nodeName"), claim([exactly("gpu", GPU)]), None),
    ("an older generation is dropped", lambda s: s.append(_older_gpu_slice()), claim([exactly("gpu", GPU, mode="All")]), list(GPUS)),
    ("a newer generation replaces the older", lambda s: s.append(_newer_gpu_slice()), claim([exactly("gpu", GPU, mode="All")]), ["gpu-9"]),
    ("incomplete pool: ExactCount still allocates from it", _incomplete, claim([exactly("gpu", GPU, 2)]), ["gpu-0", "gpu-1"]),
    ("incomplete pool: All is an error", _incomplete, claim([exactly("gpu", GPU, mode="All")]), AllocationError),
    ("incomplete GPU pool: All over NICs is an error too (every pool is checked)", _incomplete, claim([exactly("nic", NIC, mode="All")]), AllocationError),
    ("duplicate device name: the pool is invalid, an error once the search reaches it", _duplicate, claim([exactly("gpu", GPU)]), AllocationError),
    ("a device with binding conditions is never selectable", lambda s: device(s, "gpu-0").update(bindingConditions=["attached"]), claim([exactly("gpu", GPU)]), ["gpu-1"]),
    ("a device consuming counters is never allocated", lambda s: device(s, "gpu-0").update(consumesCounters=[{"counterSet": "x", "counters": {}}]), claim([exactly("gpu", GPU)]), ["gpu-1"]),
]


@pytest.mark.parametrize(("case", "edit", "spec", "want"), POOLS, ids=[c[0][:60] for c in POOLS])
def test_pools(case, edit, spec, want):
    slices = edited(edit)
    if isinstance(want, type):
        with pytest.raises(want):
            run(spec, slices=slices)
        return
    got = run(spec, slices=slices)
    assert (None if got is None else [r["device"] for r in got]) == want, case


# --- Not modelled ---------------------------------------------------------------------------------------------------


def test_not_modelled_parts_refuse():
    admin = claim([{"name": "gpu", "exactly": {"deviceClassName": GPU, "adminAccess": True}}])
    with pytest.raises(NotImplementedError):
        run(admin)
    selected = edited(lambda s: s[0]["spec"].update(nodeName=None, nodeSelector={"nodeSelectorTerms": []}))
    with pytest.raises(NotImplementedError):
        run(claim([exactly("gpu", GPU)]), slices=selected)
