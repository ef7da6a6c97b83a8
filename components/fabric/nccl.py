"""What NCCL actually reads: a catalogue over NVIDIA's own variable list (NCCL v2.30.7).

`data/nccl_env.json` is that list compiled at NVIDIA/nccl@v2.30.7-1 (docs/userguide/source/env.rst and a scan of
src/ and plugins/), pinned by sha256 in upstream.lock.yaml (a test checks it); the program reads it under `pulumi up`.
Pure module: config validation, the fabric model and the policy pack all classify names through here.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA_FILE = Path(__file__).parent / "data" / "nccl_env.json"

# Variables fastpath derives for every pod: a job may not set them unless it marks an explicit override.
PLATFORM_OWNED = (
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_GID_INDEX",
    "GLOO_SOCKET_IFNAME",
    "FI_PROVIDER",
    "FI_EFA_USE_DEVICE_RDMA",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_NET",
    "NCCL_IB_ADDR_RANGE",
)

# Where NCCL's own list explains a not-NCCL name at length, the sentence a user needs.
_NOT_NCCL_SHORT = {
    "NCCL_TIMEOUT": "the collective timeout is PyTorch's, torch.distributed.init_process_group(timeout=...)",
}

# Types whose value NCCL parses with strtoll: anything but an integer silently becomes 0 (`true` -> 0).
_INT_TYPES = ("int", "bool", "enum-int", "uint64")


@functools.cache
def catalogue() -> dict:
    return json.loads(DATA_FILE.read_text())


@dataclass(frozen=True)
class Verdict:
    """How NCCL treats one variable name. `status` is one of: known, deprecated, removed, not_nccl,
    plugin, unknown. `hint` is a sentence a user can act on (empty when the name is fine)."""

    name: str
    status: str
    hint: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("known", "plugin")


def classify(name: str) -> Verdict:
    cat = catalogue()
    variables = cat["variables"]
    entry = variables.get(name)
    if entry is not None:
        if entry.get("removed") or not entry.get("read_in_code_v2_30_7", True):
            repl = entry.get("replacement")
            return Verdict(
                name,
                "removed",
                f"{name} is no longer read by NCCL (no effect)" + (f"; use {repl} instead" if repl else "; remove it"),
            )
        if entry.get("deprecated"):
            return Verdict(name, "deprecated", f"{name} is deprecated; use {entry.get('replacement')} instead")
        return Verdict(name, "known")
    if name in cat["not_nccl_variables"]:
        why = _NOT_NCCL_SHORT.get(name) or cat["not_nccl_variables"][name].split(". ")[0].rstrip(".").removeprefix(
            "Not an NCCL variable: "
        )
        return Verdict(name, "not_nccl", f"{name} is not read by NCCL: {why}")
    for pattern, owner in cat["plugin_owned_prefixes"].items():
        if pattern.endswith("*") and name.startswith(pattern[:-1]) or name == pattern:
            return Verdict(name, "plugin", owner)
    near = difflib.get_close_matches(name, variables.keys(), n=1, cutoff=0.75)
    hint = f"{name} is not read by NCCL"
    return Verdict(name, "unknown", hint + (f"; did you mean {near[0]}?" if near else ""))


# NCCL's Inspector plugin reads its variables as integers but its dump directory (NVIDIA/nccl@v2.30.7-1:
# plugins/profiler/inspector/inspector.cc, inspector_event_pool.cc: atoi, strtoll, strtoull); the catalogue, compiled
# for libnccl, lists them untyped.
INSPECTOR_PREFIX = "NCCL_INSPECTOR_"
INSPECTOR_TEXT = frozenset({"NCCL_INSPECTOR_DUMP_DIR"})


def is_integer_typed(name: str) -> bool:
    entry = catalogue()["variables"].get(name)
    if entry and name.startswith(INSPECTOR_PREFIX):
        return name not in INSPECTOR_TEXT
    return bool(entry) and entry.get("type", "").split(" ")[0] in _INT_TYPES


_INT_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")


def value_problem(name: str, value: object) -> str | None:
    """Why `value` is wrong for `name`, or None. Booleans are refused everywhere: YAML turns `true` into a
    boolean and NCCL reads the string `true` as 0, the opposite of what was meant."""
    if isinstance(value, bool):
        return f"{name} must be written as 1 or 0, not {str(value).lower()} (NCCL reads 'true' as 0)"
    if is_integer_typed(name) and not _INT_RE.match(str(value).strip()):
        return f"{name} takes an integer, got {value!r} (NCCL parses it with strtoll: non-numbers become 0)"
    return None


def hca_list(names: list[str]) -> str:
    """NCCL_IB_HCA selecting exactly these HCAs. Without a leading `=` NCCL matches every token as a prefix of
    the devices on the host, so mlx5_1 also selects mlx5_10..mlx5_19 whether or not they are listed. fastpath
    cannot see the host's device list, so an explicit list is always exact."""
    return "=" + ",".join(names)


def needs_exact(value: str) -> bool:
    """True when an NCCL_IB_HCA / NCCL_SOCKET_IFNAME value lists names of which one prefixes another but the
    list is not exact (`=`): the shorter name then also selects the longer one's device."""
    body = value.lstrip("^")
    if body.startswith("="):
        return False
    names = [t.split(":")[0] for t in body.split(",") if t]
    return any(a != b and b.startswith(a) for a in names for b in names)


# A pod whose primary interface is not eth0 says so here (fastpath sets it from fabric.podInterface), so a check of
# NCCL_SOCKET_IFNAME knows the interfaces the pod really has.
PRIMARY_INTERFACE_ANNOTATION = "fastpath.dev/primary-interface"


def ifname_selects(value: str, interfaces: list[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME=`value` selects among `interfaces`: a comma list of prefixes, `=` for
    exact names, `^` to exclude (NCCL's own rule for socket interfaces)."""
    body = value.strip()
    exclude = body.startswith("^")
    body = body.lstrip("^")
    exact = body.startswith("=")
    tokens = [t.split(":")[0] for t in body.lstrip("=").split(",") if t]

    def hit(iface: str) -> bool:
        return any(iface == tok if exact else iface.startswith(tok) for tok in tokens)

    return [i for i in interfaces if hit(i) != exclude]


def socket_ifname_problem(value: str, interfaces: list[str]) -> str | None:
    """Why NCCL_SOCKET_IFNAME=`value` fails a pod with `interfaces` (bootstrap needs one that reaches the other
    pods; loopback does not), or None. One judgement for stack config, job overrides and the policy pack."""
    if [i for i in ifname_selects(value, interfaces) if i != "lo"]:
        return None
    primary = next((i for i in interfaces if i != "lo"), "eth0")
    return (
        f"NCCL_SOCKET_IFNAME={value} selects none of the pod's interfaces ({', '.join(interfaces)}): NCCL "
        f"bootstrap cannot reach other pods; use ={primary}"
    )
