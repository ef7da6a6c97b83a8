"""The bulk reader: a log in blocks of whole lines, each block judged by line shape (`BlockParser.feed_block`), with
the report that feeding its lines one at a time (parse.py) gives, at the speed of a few passes in C over the log.

Logs are read in bounded memory whatever their size; --section N reads only the lines between the N-node run's
marker lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate, compress
from pathlib import Path

from components.jobs.sections import MARKER
from tools.ncclcheck.parse import (
    BOOTSTRAP_LEADS,
    BOOTSTRAP_USING,
    CHANNEL,
    ENV_SET,
    INIT_HOST,
    INTERFACE_ADDRESS,
    MAX_LINE,
    MAX_NAMES,
    MAX_RANKS,
    NNODES_MANY,
    NO_IB_DEVICE,
    NRANKS,
    Parser,
    Report,
    profiler_line,
    section_markers,
    strip_prefix,
    transport_name,
)

# Bytes read at a time. A block costs a few passes in C over it plus a Python step per distinct line shape, and
# holds a few copies of itself and a list of its lines (about ten times its size at the peak): at 256 KiB these
# stay in the CPU's caches between passes (measured 10-20% faster than 1 MiB, no slower than 128 KiB), and the
# resident set near 18 MB.
CHUNK = 1 << 18
# Line shapes remembered between blocks (each a line of the log with its numbers zeroed).
MAX_SHAPES = 1 << 14
MARKER_BYTES = MARKER.encode()


class BlockParser(Parser):
    """A `Parser` that also reads blocks of whole lines, judging each distinct line shape once."""

    def __init__(self, bootstrap: bool = True, devices: bool = True) -> None:
        super().__init__(bootstrap, devices)
        self.shapes: dict[bytes, Shape] = {}  # by line with its digits zeroed
        self.pointerless: dict[bytes, Shape] = {}  # by line with its pointers zeroed too

    def feed_block(self, block: bytes) -> None:
        """Whole lines (ending in \\n, \\r\\n or \\r), with the same result as feeding them one at a time.

        Most lines of a big log differ only in their numbers (ranks, pids, pointers), so the block is cut into lines
        with their digits zeroed (and pointers, in `_shape`), which every pattern here treats alike (same length, same
        classes): each distinct shape is judged once, by `feed` on one line of it (`Shape.of`), and what it does is
        applied once per line of that shape. Only lines whose effect depends on their numbers or on their order
        (ranks, versions, failures, the results table) are fed one at a time, in order."""
        if b"\r" in block and block.count(b"\r") != block.count(b"\r\n"):
            self._feed_lines(block)  # lone CRs end lines too, as in a text-mode read: rare enough to go slowly
            return
        if not self.r.multi_host and b"NCCL INFO" in block:
            # The hosts of the init lines (parse.INIT_HOST), which shapes cannot tell apart: until a second is seen.
            if b"nNodes" in block and NNODES_MANY_BYTES.search(block):
                self.r.multi_host = True
            for m in INIT_HOST_BYTES.finditer(block) if not self.r.multi_host else ():
                self.hosts.add(m.group(1).decode("utf-8", "replace"))
                if len(self.hosts) > 1:
                    self.r.multi_host = True
                    break
        norm = block.translate(ZERO_DIGITS)
        lines = norm.split(b"\n")
        judged = self._judged(lines)
        # Every `via P0P/` of the zeroed lines must have been a `via P2P/` (their shapes put the 2 back): each `via
        # P2P/` in the block is a `via P0P/` in them, so the counts are equal only then.
        p2p = sum(line.count(P2P[1]) * n for line, (_, n) in judged.items() if P2P[1] in line)
        # A NIC list in a line read whole would be kept or not in an order the shapes cannot tell, and a NET device
        # found where `feed` reads none would be too many: rare lines, so the whole block goes line by line.
        if (
            (p2p and block.count(P2P[0]) != p2p)
            or any(shape.slow_nics or (self.read_devices and not shape.devices_agree) for shape, _ in judged.values())
            or not self._order_free(judged.values())
        ):
            self._feed_lines(block)
            return
        for shape, n in judged.values():
            shape.apply(self, n)
        self._nic_lists(block, norm, judged)
        if self.read_devices and any(shape.device for shape, _ in judged.values()):
            # One search finds none in the common case (every device already seen), then findall those it finds.
            if (unseen := _unseen_devices(frozenset(self.net_devices))).search(block):
                self.net_devices.update(map(int, unseen.findall(block)))
        per_line = {line: n for line, (shape, n) in judged.items() if shape.per_line}
        if not per_line:
            return
        slow = {line: n for line, n in per_line.items() if judged[line][0].slow}
        if sum(slow.values()) <= MAX_FOUND and all(shape.in_bulk for shape, _ in judged.values()):
            kinds = [any(shape.hits[kind] for shape, _ in judged.values()) for kind in range(4)]
            env_at = {line: shape.env_at for line, (shape, _) in judged.items() if shape.env_at}
            boot = {line: (shape.boot_at, n) for line, (shape, n) in judged.items() if shape.boot_at}
            self._read_in_bulk(block, norm, slow, kinds, env_at, boot)
        else:
            self._read_line_by_line(block, lines, judged, set(per_line))

    def _nic_lists(self, block: bytes, norm: bytes, judged: dict[bytes, tuple[Shape, int]]) -> None:
        """The block's NIC lists: how many NICs a line lists is its shape's, so only the first line of the longest
        (when longer than the longest yet) and of the shortest (when shorter than the shortest yet) is read; the
        first of each length in the log is the one kept, as feeding every line would keep it."""
        counts = {line: shape.nic_count for line, (shape, _) in judged.items() if shape.nic_count is not None}
        if not counts:
            return
        longest, shortest = max(counts.values()), min(counts.values())
        wanted = [line for line, count in counts.items() if count == longest and longest > len(self.nics)]
        if self.fewest is None or shortest < len(self.fewest):
            wanted += [line for line, count in counts.items() if count == shortest]
        for start, length in sorted({_line_starts(norm, line, 1)[0] for line in wanted}):
            self._nic_line(strip_prefix(block[start : start + length].decode("ascii")))

    def _judged(self, lines: list[bytes]) -> dict[bytes, tuple[Shape, int]]:
        """Each distinct line (digits zeroed) with its shape and how many times it is there."""
        cache, judged = self.shapes, {}
        for line, n in Counter(lines).items():
            if (shape := cache.get(line)) is None:
                if len(cache) >= MAX_SHAPES:
                    cache.clear()
                shape = cache[line] = self._shape(line)
            judged[line] = (shape, n)
        return judged

    def _shape(self, line: bytes) -> Shape:
        """The shape of a line with its digits zeroed: its `via P0P/` taken for `via P2P/` (`feed_block` makes sure)
        and its pointers zeroed, so that lines differing only in a pointer's hex letters share one."""
        key = line.replace(P2P[1], P2P[0]) if P2P[1] in line else line
        if b"0x" in key:
            key = _zero_pointers(key)
        if (shape := self.pointerless.get(key)) is None:
            if len(self.pointerless) >= MAX_SHAPES:
                self.pointerless.clear()
            shape = self.pointerless[key] = Shape.of(key, self.read_bootstrap)
        return shape

    def _read_in_bulk(
        self,
        block: bytes,
        norm: bytes,
        slow: dict[bytes, int],
        kinds: list[bool],
        env_at: dict[bytes, tuple[int, int, int, int]],
        boot: dict[bytes, tuple[tuple[tuple[int, int], ...], int]],
    ) -> None:
        """Ranks, environment and nccl-tests ranks by one regex over the block each, for the `kinds` its shapes hold
        (`Shape.in_bulk` made sure each match is one that `feed` takes, as many per line as it takes); the few slow
        lines found by their shape. Variables whose lines have digits (`env_at`: where name and value are in lines of
        that shape) are read from the last line of each shape: the last value set wins, and `_order_free` made sure
        that no bound fills up, so the lines before it change nothing, unless the names themselves hold digits.
        Bootstrap interfaces are read where the lines that hold them are (`boot`: where in each line, and how many
        lines), or by a regex over the block when they have many shapes."""
        r = self.r
        if kinds[0] and (found := RANKS_BYTES.findall(block)):
            # Sets of the numbers as written first: a block holds each rank's few init lines, and int() is per value.
            r.nranks = max(r.nranks or 0, max(map(int, {nranks for _, nranks, _ in found})))
            _add_bounded(self.complete, [rank for rank, _, complete in found if complete])
        if env_at and not any(b"0" in norm_line[a:b] for norm_line, (a, b, _, _) in env_at.items()):
            for start, (a, b, c, d) in sorted(
                (_line_starts(norm, line, 1, last=True)[0][0], at) for line, at in env_at.items()
            ):
                if (name := block[start + a : start + b].decode("ascii")) in r.env or len(r.env) < MAX_NAMES:
                    r.env[name] = block[start + c : start + d].decode("ascii")
        elif env_at and kinds[1]:
            # In order: the last value set wins, and a name is first set where it first appears. (Without `env_at`,
            # every variable is one its shape set, to one value: `_order_free`.)
            for name, value in dict(ENV_BYTES.findall(block)).items():
                if name.decode() in r.env or len(r.env) < MAX_NAMES:
                    r.env[name.decode()] = value.decode()
        if kinds[2]:
            _add_bounded(self.test_ranks, TEST_RANK_BYTES.findall(block))
        if kinds[3] and len(boot) > MAX_FOUND_SHAPES:
            self._bootstrap(_bootstrap_names(block))
        elif kinds[3]:
            found = sorted(
                (start + a, block[start + a : start + b])
                for line, (spans, n) in boot.items()
                for start, _ in _line_starts(norm, line, n)
                for a, b in spans
            )
            self._bootstrap(name.decode("utf-8", "replace") for _, name in found)
        if not slow:
            return
        starts = []
        for line, n in slow.items():  # where each slow line starts: found in `norm`, whose offsets are the block's
            starts += _line_starts(norm, line, n)
        for start, length in sorted(starts):
            self.feed(block[start : start + length].decode("utf-8", "replace")[:MAX_LINE])

    def _read_line_by_line(
        self, block: bytes, lines: list[bytes], judged: dict[bytes, tuple[Shape, int]], per_line: set[bytes]
    ) -> None:
        """The lines whose shapes need them, each in turn; then the channels whose names hold digits, in the order
        they first came."""
        starts = accumulate(map((1).__add__, map(len, lines)), initial=0)  # where each line starts in the block
        vias: Counter[bytes] = Counter()
        for at, line in compress(zip(starts, lines, strict=False), map(per_line.__contains__, lines)):
            self._line(block[at : at + len(line)], judged[line][0], vias)
        for via, n in vias.items():
            name = transport_name(via.decode("ascii"))
            if name in self.channels or len(self.channels) < MAX_NAMES:
                self.channels[name] += n
            if name.startswith("NET/"):
                self.r.net_channels += n
                self._network(name.split("/")[1])

    def _line(self, raw: bytes, shape: Shape, vias: Counter[bytes]) -> None:
        """What a line of `shape` does that its shape cannot say: its numbers, or all of it for a slow shape; channels
        whose names hold digits are counted in `vias`."""
        if shape.boot and not shape.slow:
            self._bootstrap([raw[a:b].decode("utf-8", "replace") for a, b in shape.boot_at])
        if shape.via:
            vias[raw[shape.via[0] : shape.via[1]]] += 1
        elif shape.slow:
            self.feed(raw.decode("utf-8", "replace")[:MAX_LINE])
        elif shape.rank_at is not None:
            if len(self.test_ranks) < MAX_RANKS:
                self.test_ranks.add(int(raw[shape.rank_at[0] : shape.rank_at[1]]))
        elif shape.env_at:  # the last value set wins, so in order
            a, b, c, d = shape.env_at
            name, value, env = raw[a:b].decode("ascii"), raw[c:d].decode("ascii"), self.r.env
            if name in env or len(env) < MAX_NAMES:
                env[name] = value
        elif shape.ranks_at:  # an init line: its one `rank N nranks M`, which `feed` reads (Shape.of made sure)
            a, b, c, d = shape.ranks_at
            self.r.nranks = max(self.r.nranks or 0, int(raw[c:d]))
            if shape.complete and len(self.complete) < MAX_RANKS:
                self.complete.add(int(raw[a:b]))

    def _order_free(self, judged: Iterable[tuple[Shape, int]]) -> bool:
        """Whether applying the block's shapes out of line order gives what feeding its lines in order would: no
        bounded collection fills up in this block, and no environment variable is set both by lines applied by
        shape and by other lines, or to two values (the last one set wins)."""
        channels: set[str | None] = set(self.channels)
        networks: set[str | None] = set(self.networks)
        by_shape: dict[str, str] = {}
        by_line: set[str] = set()
        unsure, read_per_line = False, 0  # read_per_line: names that channels read line by line may add
        for shape, _ in judged:
            channels.add(shape.channel)  # None (no channel) is discarded below
            networks.add(shape.network)
            read_per_line += 4 if shape.via else 0
            if shape.env and (shape.slow or shape.env_at):
                by_line.add(shape.env[0])  # a name with digits zeroed stands for several: none is set by shape
                unsure = unsure or "0" in shape.env[0]
            elif shape.env and by_shape.setdefault(shape.env[0], shape.env[1]) != shape.env[1]:
                return False
        channels.discard(None)
        networks.discard(None)
        return (
            len(channels) + read_per_line <= MAX_NAMES
            and len(networks) + read_per_line <= MAX_NAMES
            and not by_line & by_shape.keys()
            and not (unsure and by_shape)
            and len(self.r.env.keys() | by_line | by_shape.keys()) + 4 * unsure < MAX_NAMES
        )

    def _feed_lines(self, block: bytes | str) -> None:
        """The block one line at a time, split where a text-mode read splits (\\n, \\r\\n, \\r)."""
        text = block if isinstance(block, str) else block.decode("utf-8", "replace")
        for line in EOL.split(text):
            self.feed(line[:MAX_LINE])


ZERO_DIGITS = bytes.maketrans(b"0123456789", b"0" * 10)
# A pointer or id printed by %p / 0x%lx (`comm 0x55d0c8e000`), in a line whose digits are zeroed: its hex letters are
# zeroed too, so that every rank's init lines share a shape. Only whole `0x...` words: no pattern here looks for hex
# letters alone, and no word of a marker is hex.
HEX_POINTER = re.compile(rb"(0x[0-9]*[a-f][0-9a-f]*)(?![\w])")
# NRANKS, INIT, ENV_SET and TEST_RANK over a block, where `\s` must not cross a line. Shape.of checks that they find
# in a line what the str patterns find (lines with whitespace that only str knows as such are read by `feed`).
RANKS_BYTES = re.compile(rb"rank (\d{1,9}) nranks (\d{1,9})( [^\n]*- Init COMPLETE)?")
ENV_BYTES = re.compile(rb"(NCCL_\w{1,64}) set by environment to ([^\s]{0,200}?)\.?(?![^\s])")
TEST_RANK_BYTES = re.compile(rb"#[^\S\n]+Rank[^\S\n]+(\d{1,9})[^\S\n]+(?:Group[^\S\n]+\d+[^\S\n]+)?Pid\b")
RANKS_ANYWHERE = re.compile(rb"rank \d{1,9} nranks \d{1,9}")
# parse.INIT_HOST over a block: `.` becomes "not a newline" (bytes `\s` matches none either).
INIT_HOST_BYTES = re.compile(INIT_HOST.pattern.replace(".{0,200}", "[^\n]{0,200}").encode())
NNODES_MANY_BYTES = re.compile(NNODES_MANY.pattern.encode())
# The device of a NET channel (`via NET/IB/3/GDRDMA`: 3) over a block; Shape.of checks that it finds in each line
# the one `feed` reads (parse.net_device), at the same place, and nothing else.
NET_DEVICE = rb"via NET/[^/\n]{1,64}/%s(\d{1,3})(?![^/\s])"
NET_DEVICE_BYTES = re.compile(NET_DEVICE % b"")


@lru_cache(maxsize=64)
def _unseen_devices(seen: frozenset[int]) -> re.Pattern[bytes]:
    """NET_DEVICE_BYTES but for the devices in `seen`: over a block whose devices were all seen it finds nothing,
    one search without a match object per channel line (the set of devices is small and soon complete)."""
    if not seen:
        return NET_DEVICE_BYTES
    known = b"|".join(str(device).encode() for device in sorted(seen))
    return re.compile(NET_DEVICE % (b"(?!(?:" + known + rb")(?![^/\s]))"))


# BOOTSTRAP_USING as one pattern per lead, each with its literal prefix for sre's fast scan (the alternation has
# none, and is twenty times slower over a block); their matches never overlap (a lead holds spaces, the interface
# and address none), so together, in order, they find what BOOTSTRAP_USING finds.
BOOTSTRAP_BYTES = tuple(re.compile((lead + INTERFACE_ADDRESS).encode()) for lead in BOOTSTRAP_LEADS)
# Whitespace to str (strip, split, \s) but not to bytes patterns: lines holding them are read by `feed`.
STR_ONLY_SPACE = re.compile(rb"[\x1c-\x1f]")
# Past this many slow lines in a block, finding each by its shape costs more than walking the block's lines; past
# this many shapes of lines with bootstrap interfaces, finding their lines costs more than a regex over the block.
MAX_FOUND = 64
MAX_FOUND_SHAPES = 16
# `via P2P/...`, the transport of most channel lines, zeroed: its shape puts the 2 back, or every such line would
# be read on its own (a name with a digit).
P2P = (b"via P2P/", b"via P0P/")
EOL = re.compile(r"\r\n|\r|\n")


_WORD_BYTES = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_ZEROS = [b"0x".ljust(n, b"0") for n in range(40)]  # by length: %p and 0x%lx print at most 16 digits


def _zero_pointers(line: bytes) -> bytes:
    """`line` with each `0x` pointer word zeroed to the same length: split around them (the capturing group keeps
    them in the list, at odd places) and joined back."""
    parts = HEX_POINTER.split(line)
    if len(parts) == 1:
        return line
    for i in range(1, len(parts), 2):
        # A lookbehind in the pattern would cost sre its fast scan for `0x`, so the start of the word is checked
        # here: the text before a pointer is never empty but at the start of the line (a match ends before a
        # non-word byte, and a match starts with `0`).
        before = parts[i - 1]
        if not before or before[-1] not in _WORD_BYTES:
            size = len(parts[i])
            parts[i] = _ZEROS[size] if size < len(_ZEROS) else b"0x".ljust(size, b"0")
    return b"".join(parts)


@dataclass(frozen=True)
class Shape:
    """What every line of one shape (its digits and pointers zeroed) does to a `Parser`, learnt from one of them."""

    nccl_lines: int = 0
    channel: str | None = None
    network: str | None = None
    link_layers: frozenset[str] = frozenset()
    env: tuple[str, str] | None = None
    nranks: bool = False  # carries a rank and nranks, read from each line
    complete: bool = False  # ... and says Init COMPLETE
    via: tuple[int, int] | None = None  # where a channel line's `via` text is, when its name holds digits
    env_at: tuple[int, int, int, int] | None = None  # where the variable and its value are, when they hold digits
    rank_at: tuple[int, int] | None = None  # where the rank of a line of nccl-tests' device list is
    ranks_at: tuple[int, int, int, int] | None = None  # where an init line's rank and nranks are (RANKS_BYTES)
    slow: bool = False  # fed line by line: its effect depends on its numbers or on what came before
    boot: int = 0  # bootstrap interfaces `feed` reads from each line (BOOTSTRAP_USING), slow or not
    boot_at: tuple[tuple[int, int], ...] = ()  # where the interfaces BOOTSTRAP_BYTES finds are, in order
    hits: tuple[int, int, int, int] = (0, 0, 0, 0)  # matches of RANKS_ANYWHERE, ENV_BYTES, TEST_RANK_BYTES,
    # BOOTSTRAP_BYTES in the line
    nic_count: int | None = None  # a process's NIC list (`NET/IB : Using ...`) of this many NICs, whatever digits
    slow_nics: bool = False  # read whole, and may hold a NIC list (or `No device found`)
    device: bool = False  # a NET channel whose device NET_DEVICE_BYTES reads
    devices_agree: bool = True  # NET_DEVICE_BYTES finds in this shape the device `feed` reads, and nothing else

    @property
    def in_bulk(self) -> bool:
        """Whether the block-wide regexes of `Parser._read_in_bulk` find in lines of this shape exactly what `feed`
        takes from them: nothing in a line fed whole, one match where `feed` reads one."""
        if self.via is not None:
            return False
        if self.slow:
            return self.hits == (0, 0, 0, 0) and not self.boot
        return self.hits == (int(self.nranks), int(self.env is not None), int(self.rank_at is not None), self.boot)

    @property
    def per_line(self) -> bool:
        return (
            self.slow
            or self.nranks
            or self.via is not None
            or self.env_at is not None
            or self.rank_at is not None
            or self.boot > 0
        )

    @classmethod
    def of(cls, shape: bytes, bootstrap: bool = True) -> Shape:
        """The shape of a line, for a parser that reads bootstrap interfaces or not."""
        boot, boot_at = 0, tuple[tuple[int, int], ...]()
        if bootstrap:  # what `feed` reads on every line of the shape (numbers change the name, never the count)
            line = strip_prefix(shape[: MAX_LINE * 4].decode("utf-8", "replace")[:MAX_LINE])
            boot = len(BOOTSTRAP_USING.findall(line)) if "Using " in line else 0
            boot_at = tuple(sorted(m.span(1) for pattern in BOOTSTRAP_BYTES for m in pattern.finditer(shape)))
        hits = (
            len(RANKS_ANYWHERE.findall(shape)),
            len(ENV_BYTES.findall(shape)),
            len(TEST_RANK_BYTES.findall(shape)),
            len(boot_at),
        )
        judged = cls._judge(shape)
        # Spans in the shape are spans in each of its lines: zeroing keeps lengths and the classes patterns match.
        ranks = RANKS_BYTES.search(shape) if judged.nranks else None
        ranks_at = (*ranks.span(1), *ranks.span(2)) if ranks else None
        device_at = cls._device_at(shape)
        found = [m.start() for m in NET_DEVICE_BYTES.finditer(shape)]
        return replace(
            judged,
            hits=hits,
            boot=boot,
            boot_at=boot_at,
            ranks_at=ranks_at,
            slow_nics=judged.slow and b"NET/IB" in shape and (b"Using" in shape or NO_IB_DEVICE.encode() in shape),
            device=device_at is not None,
            devices_agree=found == ([] if device_at is None else [device_at]),
        )

    @staticmethod
    def _device_at(shape: bytes) -> int | None:
        """Where the `via ` of the NET device `feed` reads in lines of this shape starts, or None: none read, or a
        line `feed` reads whole without a probe here (then NET_DEVICE_BYTES must find nothing in it)."""
        if b"NET/" not in shape or not shape.isascii() or len(shape) > MAX_LINE or STR_ONLY_SPACE.search(shape):
            return None
        text = shape.decode("ascii")
        probe = Parser(bootstrap=False, devices=True)
        probe.feed(text)
        line = strip_prefix(text)
        if not probe.net_devices or not (m := CHANNEL.search(line)):
            return None
        lead = len(text) - len(text.lstrip()) + len(text.strip()) - len(line)  # where `line` starts in `text`
        return lead + m.start(1) - len("via ")

    @classmethod
    def _judge(cls, shape: bytes) -> Shape:
        """Feed the shape to a fresh parser and keep what it did when that is the same for every line of the shape
        (no value holding a digit, which the shape has zeroed) and does not depend on order; else `slow`."""
        slow = cls(slow=True)
        if not shape.isascii() or len(shape) > MAX_LINE or STR_ONLY_SPACE.search(shape):
            return slow
        text = shape.decode("ascii")
        line = strip_prefix(text)
        if line[:1].isdigit():  # a results row: what it gives depends on the table header before it
            return slow
        if profiler_line(line):
            return slow
        probe = Parser()
        unset = probe.r.socket_interfaces  # compared by identity: a line may set it to an empty list
        probe.feed(text)
        r, blank = probe.r, Report()
        if r.socket_interfaces is not unset or (
            r.nccl_version,
            r.failures,
            r.warnings,
            r.rdma_absent,
            r.quoted_warn,
            r.ofi_provider,
            probe.table,
            probe.avg_count,
            r.peak_busbw_gbps,
            r.mnnvl,
            r.clique_size,
        ) != (
            blank.nccl_version,
            blank.failures,
            blank.warnings,
            blank.rdma_absent,
            blank.quoted_warn,
            blank.ofi_provider,
            None,
            0,
            None,
            None,
            None,
        ):
            return slow
        lead = len(text) - len(text.lstrip()) + len(text.strip()) - len(line)  # where `line` starts in `text`
        if probe.test_ranks:  # a line of nccl-tests' device list (a comment: nothing else): its rank, per line
            return cls(rank_at=rank.span(1)) if (rank := TEST_RANK_BYTES.match(shape, lead)) else slow
        channel = next(iter(probe.channels), None)
        network = next(iter(probe.networks), None)
        env = next(iter(r.env.items()), None)
        if probe.fewest is not None:  # a NIC list: read from its line when it is the longest or the shortest yet
            if not probe.fewest or channel or env or r.nranks is not None or "0" in (network or ""):
                return cls(slow=True, env=env)
            return cls(
                nccl_lines=r.nccl_lines,
                network=network,
                link_layers=frozenset(probe.link_layers),
                nic_count=len(probe.fewest),
            )
        if channel and "0" in channel and (m := CHANNEL.search(line)):  # read from each line, at the same place
            return cls(nccl_lines=r.nccl_lines, via=(lead + m.start(1), lead + m.end(1)))
        if any("0" in value for value in (channel or "", network or "")):
            return cls(slow=True, env=env)
        if env and "0" in "".join(env) and (m := ENV_SET.search(line)) and not probe.complete and r.nranks is None:
            return cls(
                nccl_lines=r.nccl_lines,
                network=network,
                link_layers=frozenset(probe.link_layers),
                env=env,
                env_at=(lead + m.start(1), lead + m.end(1), lead + m.start(2), lead + m.end(2)),
            )
        if env and "0" in "".join(env):
            return cls(slow=True, env=env)
        nranks = r.nranks is not None
        if nranks and len(NRANKS.findall(line)) != 1:
            return cls(slow=True, env=env)
        return cls(
            nccl_lines=r.nccl_lines,
            channel=channel,
            network=network,
            link_layers=frozenset(probe.link_layers),
            env=env,
            nranks=nranks,
            complete=bool(probe.complete),
        )

    def apply(self, parser: Parser, n: int) -> None:
        """What `n` lines of this shape do, but for their ranks (read per line) and for slow shapes."""
        if self.slow:
            return
        r = parser.r
        r.nccl_lines += self.nccl_lines * n
        if self.channel:
            parser.channels[self.channel] += n
            if self.channel.startswith("NET/"):
                r.net_channels += n
        if self.network:
            parser.networks.add(self.network)
        parser.link_layers |= self.link_layers
        if self.env:
            r.env[self.env[0]] = self.env[1]


def _bootstrap_names(text: bytes) -> list[str]:
    """The interfaces BOOTSTRAP_USING finds in `text`, in order (the list they go to is bounded)."""
    found = sorted((m.start(), m.group(1)) for pattern in BOOTSTRAP_BYTES for m in pattern.finditer(text))
    return [name.decode("utf-8", "replace") for _, name in found]


def _add_bounded(ranks: set[int], written: list[bytes]) -> None:
    """Add the ranks `written` (in the log's order and spelling) to `ranks`, which holds at most MAX_RANKS."""
    new = set(map(int, set(written)))
    if len(ranks) + len(new) <= MAX_RANKS:
        ranks |= new
        return
    for rank in map(int, written):  # filling up: in the log's order, as feeding line by line would
        if len(ranks) < MAX_RANKS:
            ranks.add(rank)


def _line_starts(text: bytes, line: bytes, n: int, last: bool = False) -> list[tuple[int, int]]:
    """(start, length) of the first `n` lines of `text` (split at \\n) equal to `line`; with `last`, of the last
    one, which must be there."""
    found, size = [], len(line)
    if last:
        if text.endswith(b"\n" + line) or text == line:
            return [(len(text) - size, size)]
        pos = text.rfind(b"\n" + line + b"\n") + 1
        return [(pos if pos else 0, size)]  # not found in the middle: it is the first line
    if text.startswith(line) and text[size : size + 1] in (b"\n", b""):
        found.append((0, size))
    needle, pos = b"\n" + line + b"\n", 0
    while len(found) < n and (pos := text.find(needle, pos) + 1):
        found.append((pos, size))
    if len(found) < n and text.endswith(b"\n" + line):  # the last line, without a line end after it
        found.append((len(text) - size, size))
    return found[:n]


def read_blocks(path: Path, chunk_size: int = CHUNK) -> Iterator[bytes | str]:
    """A log in blocks of whole lines of about `chunk_size` bytes, for `Parser.feed_block`. A line longer than
    MAX_LINE characters comes alone, as a str cut to MAX_LINE, and the rest of it is skipped, not held."""
    # The first MAX_LINE characters lie within this many bytes, however they are encoded.
    longest = 4 * MAX_LINE
    with open(path, "rb") as f:
        carry, skipping = b"", False
        while chunk := f.read(chunk_size):
            if skipping:  # the rest of a long line, up to its end
                ends = [i for i in (chunk.find(b"\n"), chunk.find(b"\r")) if i >= 0]
                if not ends:
                    continue
                chunk, skipping = chunk[min(ends) :], False
            last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            if last < 0:  # no line ends in this chunk: all of it belongs to the line in `carry`
                carry += chunk
            else:  # one copy of the chunk (none when it ends a line and nothing is carried), not a copy per step
                yield b"".join((carry, memoryview(chunk)[: last + 1])) if carry or last + 1 < len(chunk) else chunk
                carry = chunk[last + 1 :]
            if len(carry) > longest:
                yield carry[:longest].decode("utf-8", "replace")[:MAX_LINE]
                carry, skipping = b"", True
        if carry:
            yield carry


def parse_files(
    paths: Iterable[Path],
    section: str | int | None = None,
    chunk_size: int = CHUNK,
    bootstrap: bool = True,
    devices: bool = True,
) -> tuple[Report, bool]:
    """`parse` of the logs' lines, read in blocks: the same report, at the speed of a few passes in C over the log."""
    parser = BlockParser(bootstrap, devices)

    def blocks() -> Iterator[bytes | str]:
        for path in paths:
            yield from read_blocks(path, chunk_size)

    if section is None:
        for block in blocks():
            parser.feed(block) if isinstance(block, str) else parser.feed_block(block)
        return parser.report(), True
    begin, end = section_markers(section)
    found = inside = False
    for block in blocks():
        for lines, marker in _around_markers(block):
            if marker is None:
                if inside:
                    parser.feed(lines) if isinstance(lines, str) else parser.feed_block(lines)
                continue
            if (stripped := strip_prefix(marker)) == begin:
                parser, found, inside = BlockParser(bootstrap, devices), True, True
            elif stripped == end and inside:
                return parser.report(), found
            elif inside:
                parser.feed(marker)
    return parser.report(), found


def _around_markers(block: bytes | str) -> Iterator[tuple[bytes | str, str | None]]:
    """A block as runs of lines without a section marker, (lines, None), and the lines holding one, ("", line)."""
    if isinstance(block, str):  # one long line
        yield ("", block) if MARKER in block else (block, None)
        return
    pos = 0
    while (hit := block.find(MARKER_BYTES, pos)) >= 0:
        start = max(block.rfind(b"\n", pos, hit), block.rfind(b"\r", pos, hit), pos - 1) + 1
        stop = min(i for i in (block.find(b"\n", hit), block.find(b"\r", hit), len(block)) if i >= 0)
        if start > pos:
            yield block[pos:start], None
        yield "", block[start:stop].decode("utf-8", "replace")[:MAX_LINE]
        pos = stop + (2 if block.startswith(b"\r\n", stop) else 1)
    if pos < len(block):
        yield block[pos:], None


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse. Each block makes a few buffers of its size; by default glibc gives
    the freed ones back to the kernel (trim, or munmap above its mmap threshold) and faults fresh pages in for the
    next block, which was a seventh of the CPU time, all of it in the kernel. Resident memory stays what the
    largest block needs. Elsewhere (musl, macOS) nothing changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep up to 64 MiB of free heap
    mallopt(-3, 16 << 20)  # M_MMAP_THRESHOLD: blocks come from the heap, not a mapping each
