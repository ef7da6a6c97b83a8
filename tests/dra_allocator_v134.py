"""How the kube-scheduler's structured DRA allocator of Kubernetes 1.34 allocates ONE ResourceClaim (resource.k8s.io/v1)
on ONE node, as small pure functions the tests apply to fake ResourceSlices (tests/dra_slices.py). Each restates the
upstream rule it models, read at kubernetes/dynamic-resource-allocation@v0.34.0 (the staging copy of
k8s.io/dynamic-resource-allocation that Kubernetes 1.34.0 vendors; A: below), in structured/internal/stable/
(allocator_stable.go, pools_stable.go) and cel/compile.go. Limits come from k8s.io/api resource/v1 types.go
(K: below; read as vendored by kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1, k8s.io/api v0.36.0-rc.0: the 1.34 OpenAPI
schema states none of them, and older copies found through code search have the same values). If upstream changes,
this file and tests/test_dra_allocator_rules.py move together, on purpose.

Which implementation runs: A:structured/allocator.go NewAllocator picks the first of stable, incubating, experimental
whose supported features cover the enabled ones. With 1.34's default gates (DRAAdminAccess, DRAPrioritizedList and
DRAResourceClaimDeviceStatus on) that is "experimental", not "stable": stable supports none, incubating lacks
DeviceStatus (kubernetes/kubernetes#133967 says so and changes the selection after 1.34). For everything modelled here
the three implementations at v0.34.0 search in the same order and check constraints identically (stable and
incubating diffed whole; experimental's matchAttribute add, lookupAttribute and allocateOne device loop diffed); they
differ in features left out below, and incubating/experimental give up sooner once a branch would exceed 32 devices
(errAllocationResultMaxSizeExceeded: less work, same answer).

Modelled: the node's pools (slice node selection, generation, completeness, duplicate device names), class selectors
then request selectors in CEL (cel-python, with the DRA variable layout of cel/compile.go), ExactCount and All,
firstAvailable sub-requests (as with DRAPrioritizedList on, the 1.34 default), matchAttribute constraints, the 32
devices-per-claim limit, the exhaustive depth-first search with backtracking, and the order of the results.
Not modelled: admin access (a request that sets adminAccess raises NotImplementedError), binding conditions (devices
that declare them are never selectable, as with DRADeviceBindingConditions off), partitionable devices (devices that
consume counters are never allocated and perDeviceNodeSelection slices are skipped, as with DRAPartitionableDevices
off), device taints (ignored, as with DRADeviceTaints off), consumable capacity and distinctAttribute, slice
nodeSelector (NotImplementedError: the node here is only a name), the configs and nodeSelector of the result, CEL cost
limits, and the semver/quantity CEL libraries (version attributes and capacities reach CEL as plain strings)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes

MAX_DEVICES_PER_CLAIM = 32  # K: AllocationResultsMaxSize (and DeviceRequestsMaxSize)
MAX_CONSTRAINTS = 32  # K: DeviceConstraintsMaxSize
MAX_SUBREQUESTS = 8  # K: FirstAvailableDeviceRequestMaxSize
MAX_SELECTORS = 32  # K: DeviceSelectorsMaxSize

DeviceID = tuple[str, str, str]  # (driver, pool, device): A:structured/internal/allocatedstate.go DeviceID


class AllocationError(Exception):
    """Allocate returned an error, not "no fit": the scheduler reports it instead of trying other nodes
    (A:structured/allocator.go Allocator.Allocate doc)."""


class InvalidClaim(ValueError):
    """The apiserver would not have stored this claim (API validation, before any allocator sees it)."""


# --- Attributes -----------------------------------------------------------------------------------------------------


def qualify(name: str, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute name as a slice publishes it: a name without "/" belongs to the driver's domain.
    A:cel/compile.go parseQualifiedName (how CEL sees device.attributes[domain][id]); lookupAttribute in
    allocator_stable.go applies the same rule the other way round."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def typed_value(attr: Mapping[str, Any]) -> tuple[str, Any]:
    """(type, value) of one DeviceAttribute: exactly one of int, bool, string, version is set (K: DeviceAttribute)."""
    for kind in ("int", "bool", "string", "version"):
        if kind in attr:
            return kind, attr[kind]
    raise AllocationError(f"unsupported attribute value {dict(attr)}")


def lookup(device: Mapping[str, Any], name: str, driver: str) -> tuple[str, Any] | None:
    """The (type, value) a matchAttribute constraint reads for fully qualified `name`, or None.
    A:structured/internal/stable/allocator_stable.go lookupAttribute: the exact name first; otherwise, only when the
    name's domain is the device's driver, the bare id (so gpu.nvidia.com/type finds a GPU's unqualified `type`,
    while resource.kubernetes.io/pcieRoot must be published under exactly that name)."""
    attributes = device.get("attributes") or {}
    if name in attributes:
        return typed_value(attributes[name])
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver or ident not in attributes:
        return None
    return typed_value(attributes[ident])


def attribute(device: Mapping[str, Any], name: str, driver: str | None = None) -> Any:
    """Test helper: the plain value of attribute `name` of a device dict (lookup's rule; without `driver`, only the
    exact name), or None."""
    got = lookup(device, name, driver or "")
    return None if got is None else got[1]


# --- CEL ------------------------------------------------------------------------------------------------------------


class _DomainMap(celtypes.MapType):
    """device.attributes / device.capacity: an unknown domain reads as an empty map, an unknown id inside a domain
    is a CEL runtime error (A:cel/compile.go newStringInterfaceMapWithDefault wraps only the outer map)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def cel_device(driver: str, device: Mapping[str, Any]) -> celtypes.MapType:
    """The `device` variable a selector sees (A:cel/compile.go CompilationResult.DeviceMatches): driver, and
    attributes/capacity grouped by domain after qualify(). Versions and quantities are plain strings here."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in (device.get("attributes") or {}).items():
        domain, ident = qualify(name, driver)
        attributes.setdefault(domain, {})[ident] = typed_value(attr)[1]
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = qualify(name, driver)
        capacity.setdefault(domain, {})[ident] = str(cap["value"])

    def domains(grouped: dict[str, dict[str, Any]]) -> _DomainMap:
        return _DomainMap({celtypes.StringType(d): celpy.json_to_cel(ids) for d, ids in grouped.items()})

    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): domains(attributes),
            celtypes.StringType("capacity"): domains(capacity),
        }
    )


@functools.cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression))
    except celpy.CELParseError as err:
        raise AllocationError(f"CEL compile error: {expression}: {err}") from err


def selector_matches(expression: str, driver: str, device: Mapping[str, Any]) -> bool:
    """One CEL selector against one device. A:structured/internal/stable/allocator_stable.go selectorsMatch: a
    compile or runtime error (for example reading an attribute the device does not publish, unless a `&&`/`||`
    already decided the result) or a non-bool result aborts the whole allocation with an error."""
    try:
        result = _program(expression).evaluate({"device": cel_device(driver, device)})
    except celpy.CELEvalError as err:
        raise AllocationError(f"CEL runtime error: {expression}: {err}") from err
    if isinstance(result, celpy.CELEvalError) or not isinstance(result, celtypes.BoolType):
        raise AllocationError(f"CEL result {result!r} of {expression} is not a bool")
    return bool(result)


# --- Pools ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    """One (driver, pool name) with the slices of its newest generation seen for this node."""

    driver: str
    name: str
    slices: tuple[dict, ...]
    incomplete: bool
    invalid: str | None  # reason, e.g. "duplicate device name gpu-0"


def slice_on_node(spec: Mapping[str, Any], node: str) -> bool:
    """Whether a slice's devices are reachable from `node`. A:structured/internal/stable/pools_stable.go GatherPools
    and nodeMatches: nodeName must equal the node; allNodes matches every node; perDeviceNodeSelection slices are
    skipped without DRAPartitionableDevices; a slice with none of these set is skipped (a future extension)."""
    if spec.get("perDeviceNodeSelection") is not None:
        return False
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node)
    if spec.get("allNodes"):
        return True
    if spec.get("nodeSelector") is not None:
        raise NotImplementedError("slice nodeSelector: not modelled (the node here has no labels)")
    return False


def gather_pools(slices: Iterable[Mapping[str, Any]], node: str) -> list[Pool]:
    """A:pools_stable.go GatherPools, addSlice, poolIsInvalid: the node's slices grouped by (driver, pool.name); a
    slice of an older generation than the pool's first is dropped, a newer one replaces all kept so far; the pool is
    incomplete when the kept slices are fewer or more than the first one's pool.resourceSliceCount, invalid when a
    device name repeats. Upstream flattens a Go map here, so the order of pools is random on every call; this keeps
    first-seen order (generation and resourceSliceCount default to 0 and 1 when absent: the API requires both)."""
    kept: dict[tuple[str, str], list[dict]] = {}
    for obj in slices:
        spec = obj["spec"]
        if not slice_on_node(spec, node):
            continue
        key = (spec["driver"], spec["pool"]["name"])
        have = kept.setdefault(key, [])
        generation = spec["pool"].get("generation", 0)
        first = have[0]["spec"]["pool"].get("generation", 0) if have else generation
        if generation < first:
            continue
        if generation > first:
            have.clear()
        have.append(dict(obj))
    return [_pool(driver, name, have) for (driver, name), have in kept.items()]


def _pool(driver: str, name: str, slices: list[dict]) -> Pool:
    count = slices[0]["spec"]["pool"].get("resourceSliceCount", 1)
    seen: set[str] = set()
    invalid = None
    for device in (d for s in slices for d in s["spec"].get("devices") or []):
        if device["name"] in seen:
            invalid = f"duplicate device name {device['name']}"
            break
        seen.add(device["name"])
    return Pool(driver, name, tuple(slices), len(slices) != count, invalid)


def pool_devices(pool: Pool) -> Iterator[tuple[DeviceID, dict]]:
    """The devices of a pool in slice order, then in each slice's device order (A: allocateOne's device loop)."""
    for obj in pool.slices:
        for device in obj["spec"].get("devices") or []:
            yield (pool.driver, pool.name, device["name"]), device


# --- Requests and constraints ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A request with `exactly`, or one sub-request of a firstAvailable request (A: requestAccessor)."""

    name: str  # the request, or the sub-request without its parent's name
    parent: str  # the firstAvailable request's name; "" for an exactly request
    class_name: str
    selectors: tuple[str, ...]
    mode: str  # ExactCount | All
    count: int

    @property
    def result_name(self) -> str:
        """The `request` of its results: "<request>" or "<request>/<sub-request>" (A: requestName)."""
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @property
    def base(self) -> str:
        return self.parent or self.name


def _request(spec: Mapping[str, Any], parent: str = "") -> Request:
    if spec.get("adminAccess") is not None:
        raise NotImplementedError("adminAccess: not modelled")
    selectors = tuple(s["cel"]["expression"] for s in spec.get("selectors") or [])
    mode = spec.get("allocationMode", "ExactCount")
    count = int(spec.get("count", 1)) if mode == "ExactCount" else 0
    return Request(spec["name"], parent, spec.get("deviceClassName", ""), selectors, mode, count)


def requests_of(claim_spec: Mapping[str, Any]) -> list[tuple[Request, ...]]:
    """Per claim request, its alternatives in order: one for `exactly`, the sub-requests of `firstAvailable`
    (A:allocator_stable.go Allocate's request loop; the sub-request spec has no adminAccess)."""
    out = []
    for request in claim_spec.get("devices", {}).get("requests") or []:
        if "firstAvailable" in request:
            out.append(tuple(_request(sub, request["name"]) for sub in request["firstAvailable"]))
        else:
            out.append((_request({"name": request["name"], **request["exactly"]}),))
    return out


def validate_claim(claim_spec: Mapping[str, Any]) -> None:
    """The limits the apiserver enforces before the scheduler sees a claim (K: DeviceRequestsMaxSize,
    DeviceConstraintsMaxSize, FirstAvailableDeviceRequestMaxSize, DeviceSelectorsMaxSize; matchAttribute must carry
    a domain). Raises InvalidClaim."""
    devices = claim_spec.get("devices") or {}
    requests, constraints = devices.get("requests") or [], devices.get("constraints") or []
    if len(requests) > MAX_DEVICES_PER_CLAIM:
        raise InvalidClaim(f"{len(requests)} requests: at most {MAX_DEVICES_PER_CLAIM}")
    if len(constraints) > MAX_CONSTRAINTS:
        raise InvalidClaim(f"{len(constraints)} constraints: at most {MAX_CONSTRAINTS}")
    for request in requests:
        subs = request.get("firstAvailable") or [request.get("exactly") or {}]
        if len(subs) > MAX_SUBREQUESTS:
            raise InvalidClaim(f"request {request['name']}: {len(subs)} sub-requests: at most {MAX_SUBREQUESTS}")
        if any(len(s.get("selectors") or []) > MAX_SELECTORS for s in subs):
            raise InvalidClaim(f"request {request['name']}: more than {MAX_SELECTORS} selectors")
    for constraint in constraints:
        if "/" not in constraint.get("matchAttribute", ""):
            raise InvalidClaim(f"constraint {constraint}: matchAttribute must be a fully qualified name")


@dataclass
class MatchAttribute:
    """A:allocator_stable.go matchAttributeConstraint: every device allocated for a request in scope (all requests
    when `requests` is empty; a name matches the request or "<request>/<sub-request>") must have the attribute
    (lookup()) with the same type and value as the first one added. A device lacking it is refused, and so is one
    whose value differs. Only a count is kept: the first device of an empty set always fits and sets the value."""

    requests: frozenset[str]
    name: str
    value: tuple[str, Any] | None = None
    devices: int = 0

    def applies(self, request: Request) -> bool:
        return not self.requests or request.base in self.requests or request.result_name in self.requests

    def add(self, request: Request, device_id: DeviceID, device: Mapping[str, Any]) -> bool:
        if not self.applies(request):
            return True
        got = lookup(device, self.name, device_id[0])
        if got is None or (self.devices and got != self.value):
            return False
        if not self.devices:
            self.value = got
        self.devices += 1
        return True

    def remove(self, request: Request) -> None:
        if self.applies(request):
            self.devices -= 1


def constraints_of(claim_spec: Mapping[str, Any]) -> list[MatchAttribute]:
    """A:allocator_stable.go Allocate: each constraint becomes a matchAttributeConstraint; another kind is an error."""
    out = []
    for i, constraint in enumerate(claim_spec.get("devices", {}).get("constraints") or []):
        if "matchAttribute" not in constraint:
            raise AllocationError(f"constraint #{i}: empty constraint (unsupported constraint type?)")
        out.append(MatchAttribute(frozenset(constraint.get("requests") or ()), constraint["matchAttribute"]))
    return out


# --- The search -----------------------------------------------------------------------------------------------------


@dataclass
class Search:
    """The state of one Allocate call (A:allocator_stable.go allocator): pools, classes, in-use devices, the
    constraints' counts, the results so far, a cache of request/device matches, and how many steps it took."""

    pools: list[Pool]
    classes: Mapping[str, Mapping[str, Any]]
    allocated: frozenset[DeviceID]
    constraints: list[MatchAttribute]
    requests: list[tuple[Request, ...]]
    all_devices: dict[Request, list[tuple[DeviceID, dict]]] = field(default_factory=dict)
    results: list[tuple[Request, DeviceID]] = field(default_factory=list)
    picked: set[DeviceID] = field(default_factory=set)
    matches: dict[tuple[int, DeviceID], bool] = field(default_factory=dict)
    steps: int = 0
    scoped: dict[int, list[MatchAttribute]] = field(default_factory=dict)
    devices: list[tuple[Pool, DeviceID, dict]] = field(default_factory=list)  # every pool's, in pool_devices order

    def scope(self, request: Request) -> list[MatchAttribute]:
        """The constraints whose scope holds `request` (upstream asks every constraint; the others accept)."""
        return [c for c in self.constraints if c.applies(request)]

    def in_use(self, device_id: DeviceID) -> bool:
        """A: deviceInUse: allocated to another claim, or already picked in this search."""
        return device_id in self.allocated or device_id in self.picked

    def selectable(self, request: Request, device_id: DeviceID, device: Mapping[str, Any]) -> bool:
        """A:allocator_stable.go isSelectable and selectorsMatch: devices with binding conditions never (feature
        off); then every class selector, then every request selector, in order, first false wins; cached per
        request and device."""
        key = (id(request), device_id)  # each Request object of this search stands for one (sub-)request
        if key not in self.matches:
            exprs = [s["cel"]["expression"] for s in self.classes[request.class_name]["spec"].get("selectors") or []]
            exprs += request.selectors
            usable = not device.get("bindingConditions")
            self.matches[key] = usable and all(selector_matches(e, device_id[0], device) for e in exprs)
        return self.matches[key]

    def try_add(self, request: Request, device_id: DeviceID, device: Mapping[str, Any]) -> bool:
        """A:allocator_stable.go allocateDevice: not in use, consumes no counters (DRAPartitionableDevices off),
        accepted by every constraint in order (refusal rolls back the ones that accepted); then it is a result."""
        if self.in_use(device_id) or device.get("consumesCounters"):
            return False
        constraints = self.scoped[id(request)]
        for i, constraint in enumerate(constraints):
            if not constraint.add(request, device_id, device):
                for accepted in constraints[:i]:
                    accepted.remove(request)
                return False
        self.results.append((request, device_id))
        self.picked.add(device_id)
        return True

    def undo(self, request: Request) -> None:
        for constraint in self.scoped[id(request)]:
            constraint.remove(request)
        self.picked.discard(self.results.pop()[1])


def _class(classes: Mapping[str, Mapping[str, Any]], request: Request) -> None:
    """A:allocator_stable.go validateDeviceRequest: the class name must be set and the class must exist."""
    if not request.class_name:
        raise AllocationError(f"request {request.result_name}: missing device class name")
    if request.class_name not in classes:
        raise AllocationError(f"request {request.result_name}: could not retrieve device class {request.class_name}")


def _all_devices(search: Search, request: Request) -> list[tuple[DeviceID, dict]]:
    """A:allocator_stable.go validateDeviceRequest, mode All: every pool must be complete and valid (any pool on the
    node, whatever its driver), then every selectable device of every pool, in use or not."""
    for pool in search.pools:
        if pool.incomplete or pool.invalid:
            why = "is currently being updated" if pool.incomplete else "is currently invalid"
            raise AllocationError(f"request {request.result_name}: asks for all devices, but pool {pool.name} {why}")
    return [(i, d) for pool in search.pools for i, d in pool_devices(pool) if search.selectable(request, i, d)]


def _num_devices(search: Search, request: Request) -> int:
    return len(search.all_devices[request]) if request.mode == "All" else request.count


def _prepare(search: Search) -> None:
    """A:allocator_stable.go Allocate before the search: each (sub-)request's class must exist, an All request's
    devices are fixed now, and the fewest devices the claim can get (the smallest alternative of each request,
    summed) above 32 is an error."""
    least = 0
    for alternatives in search.requests:
        for request in alternatives:
            _class(search.classes, request)
            search.scoped[id(request)] = search.scope(request)
            if request.mode == "All":
                search.all_devices[request] = _all_devices(search, request)
            elif request.mode != "ExactCount":
                raise AllocationError(f"request {request.result_name}: unsupported count mode {request.mode}")
        least += min(_num_devices(search, r) for r in alternatives)
    if least > MAX_DEVICES_PER_CLAIM:
        raise AllocationError(f"number of requested devices {least} exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}")


def _next_request(search: Search, index: int) -> bool:
    """A:allocator_stable.go allocateOne at a request boundary: done after the last request; otherwise its
    alternatives in order (a plain request has one), the first that leads to a full solution wins."""
    search.steps += 1
    if index == len(search.requests):
        return True
    return any(_next_device(search, index, request, 0) for request in search.requests[index])


def _next_device(search: Search, index: int, request: Request, nth: int) -> bool:
    """A:allocator_stable.go allocateOne for the nth device of a request: an All request with no device fails;
    past the request's last device, go on with the next request; never more than 32 results. All takes its fixed
    devices in order, and a device that a constraint refuses is an error ("cannot add device ... because a claim
    constraint would not be satisfied"), one in use is no solution. ExactCount tries every pool, slice and device
    in order, skipping devices in use or not selectable; each accepted device recurses, and when the rest fails it
    is undone and the next is tried: a depth-first search over ordered choices that returns the first solution."""
    search.steps += 1
    wanted = _num_devices(search, request)
    if request.mode == "All" and wanted == 0:
        return False
    if nth >= wanted:
        return _next_request(search, index + 1)
    if len(search.results) + wanted - nth > MAX_DEVICES_PER_CLAIM:
        return False
    if request.mode == "All":
        return _next_all_device(search, index, request, nth)
    for pool, device_id, device in search.devices:
        if pool.invalid:
            raise AllocationError(f"pool {pool.name} is invalid: {pool.invalid}")
        if search.in_use(device_id) or not search.selectable(request, device_id, device):
            continue
        if not search.try_add(request, device_id, device):
            continue
        if _next_device(search, index, request, nth + 1):
            return True
        search.undo(request)
    return False


def _next_all_device(search: Search, index: int, request: Request, nth: int) -> bool:
    device_id, device = search.all_devices[request][nth]
    if search.in_use(device_id) or device.get("consumesCounters"):
        return False
    if not search.try_add(request, device_id, device):
        raise AllocationError(f"request {request.result_name}: cannot add device {'/'.join(device_id)} because a claim constraint would not be satisfied")
    if _next_device(search, index, request, nth + 1):
        return True
    search.undo(request)
    return False


def solve(search: Search) -> bool:
    """Run a prepared search from the first request; True when it found a solution (then in search.results)."""
    return _next_request(search, 0)


def new_search(claim_spec: dict, device_classes: list[dict], slices: list[dict], node: str, allocated: Iterable[tuple[str, str, str]] = ()) -> Search:
    """The Search allocate() runs, prepared (classes by metadata.name); for tests that want its step count."""
    validate_claim(claim_spec)
    search = Search(
        pools=gather_pools(slices, node),
        classes={c["metadata"]["name"]: c for c in device_classes},
        allocated=frozenset(allocated),
        constraints=constraints_of(claim_spec),
        requests=requests_of(claim_spec),
    )
    search.devices = [(pool, i, d) for pool in search.pools for i, d in pool_devices(pool)]
    _prepare(search)
    return search


def allocate(claim_spec: dict, device_classes: list[dict], slices: list[dict], node: str, allocated: Iterable[tuple[str, str, str]] = frozenset()) -> list[dict] | None:
    """The allocation results [{request, driver, pool, device}] of one claim on `node`, in the order the allocator
    appends them (requests in order; each request's devices in the order picked), or None when the claim does not
    fit. `allocated`: (driver, pool, device) already held by other claims. Raises AllocationError where upstream
    Allocate returns an error, InvalidClaim where the apiserver refuses the claim.
    A:structured/internal/stable/allocator_stable.go Allocator.Allocate with one claim: gather the node's pools,
    prepare the requests and constraints, search depth-first from the first request, keep the first solution."""
    search = new_search(claim_spec, device_classes, slices, node, allocated)
    if not solve(search):
        return None
    return [{"request": r.result_name, "driver": d[0], "pool": d[1], "device": d[2]} for r, d in search.results]
