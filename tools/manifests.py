"""The one manifest loader: multi-document YAML files or folders of them, `kind: List` flattened.

`read(paths)` never raises: it returns the objects it could read and, for everything else, an `Unreadable` that
names the file, the document (1-based, counted between `---` markers) and the line, and says what to do. Each
document is parsed on its own, so one bad document (a YAML error, bytes that are not UTF-8, a Helm template, an
alias bomb) costs only itself: the other documents and files are still read. `load(paths)` is the strict form
for input we render ourselves: it raises `ManifestError` (a `yaml.YAMLError`) naming every unreadable document.

Documents that are not mappings, or mappings without `kind` (Helm values, kustomize patches, CI files in the same
folder), are not Kubernetes objects and are skipped without a word.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools import yamlsafe

# libyaml's loader where PyYAML has it: rendered stacks and CRDs are megabytes of YAML.
LOADER = yamlsafe.LOADER
TEMPLATE = re.compile(r"\{\{-?\s*[^}]*\}\}")


@dataclass(frozen=True)
class Unreadable:
    file: Path
    document: int | None  # 1-based; None when the whole file could not be read
    line: int | None  # 1-based line in the file
    message: str

    def __str__(self) -> str:
        where = [f"document {self.document}"] if self.document else []
        where += [f"line {self.line}"] if self.line else []
        return f"{self.file}: {', '.join(where) + ': ' if where else ''}{self.message}"


@dataclass(frozen=True)
class Loaded:
    objects: list[tuple[Path, int, dict]]  # (file, document, object)
    unreadable: list[Unreadable]
    plain: bool = False  # read with plain=True: whole-number floats are ints, as the policy engine judges them


class ManifestError(yaml.YAMLError):
    def __init__(self, problems: list[Unreadable]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def _files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        files += sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml") and f.is_file()) if p.is_dir() else [p]
    return files


def _lines(raw: bytes) -> Iterator[bytes]:
    """The lines of a file's bytes as a text-mode read splits them (at \\n only), UTF-16 (with its byte-order mark,
    which YAML allows) re-encoded as UTF-8 first."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            raw = raw.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            pass  # not UTF-16 after all: read as UTF-8, its bad bytes reported
    return iter(io.BytesIO(raw))


def _whole_floats(doc: object) -> list[tuple[Any, Any]]:
    """Where each whole-number float sits in a parsed document, as (mapping or list, key or index). The document
    is bounded already (tools/yamlsafe.py refused bombs, cycles and deep nesting before it was built); a node an
    alias shares is visited once."""
    whole: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    stack = [doc] if isinstance(doc, dict | list) else []
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for at, v in x.items() if isinstance(x, dict) else enumerate(x):
            if isinstance(v, dict | list):
                stack.append(v)
            elif type(v) is float and v.is_integer():
                whole.append((x, at))
    return whole


def _objects(
    doc: object, file: Path, number: int, line: int, path: str = "", depth: int = 0
) -> Iterator[dict[str, Any] | Unreadable]:
    """The Kubernetes objects in one document, `List`s flattened (nested ones too); problems as Unreadable."""
    if not isinstance(doc, dict) or "kind" not in doc:
        return
    kind = doc["kind"]
    if not isinstance(kind, str):
        yield Unreadable(file, number, line, f"{path}kind is {kind!r}, not a string: not a Kubernetes object")
        return
    items = doc.get("items")
    if (kind == "List" or kind.endswith("List")) and "spec" not in doc and (isinstance(items, list) or items is None):
        if depth > 5:
            yield Unreadable(file, number, line, f"{path}Lists nested more than 5 deep: flatten them")
            return
        for i, item in enumerate(items or []):
            if not isinstance(item, dict):
                yield Unreadable(file, number, line, f"{path}items[{i}] is {type(item).__name__}, not an object")
                continue
            yield from _objects(item, file, number, line, f"{path}items[{i}].", depth + 1)
        return
    yield doc


def _parse(
    file: Path, number: int, first_line: int, body: str, bad_at: int | None, plain: bool
) -> Iterator[tuple[Path, int, dict] | Unreadable]:
    """The objects of one document, or why it cannot be read (`bad_at`: where in `body` the file's first byte that is
    not UTF-8 is); with `plain`, its whole-number floats made ints."""
    lines = body.splitlines()
    skip = next((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith(("#", "%", "---"))), 0)
    line = first_line + skip + 1  # the document's first line of content
    if bad_at is not None:
        at_line = first_line + body.count("\n", 0, bad_at) + 1
        yield Unreadable(file, number, at_line, "bytes that are not UTF-8: save the file as UTF-8")
        return
    try:
        doc = yamlsafe.load(body)
    except Exception as err:  # YAMLError, and ValueError from a timestamp such as 2024-13-01
        mark = getattr(err, "problem_mark", None)
        at_line = first_line + mark.line + 1 if mark is not None else line
        template = TEMPLATE.search(body)
        if template:
            tpl_line = first_line + body.count("\n", 0, template.start()) + 1
            yield Unreadable(
                file,
                number,
                tpl_line,
                f"a Helm/Go template ({template.group(0)[:40]}): render it "
                "first (helm template ... | python -m tools.lint -) and lint the output",
            )
            return
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        refused = isinstance(err, yamlsafe.Refused)  # valid YAML, but not to be built: says why itself
        yield Unreadable(file, number, at_line, problem if refused else f"not valid YAML: {problem}")
        return
    whole = _whole_floats(doc) if plain else []
    found = list(_objects(doc, file, number, line))  # a problem names a value as the document wrote it
    for node, at in whole if plain else ():
        node[at] = int(node[at])
    for obj in found:
        yield obj if isinstance(obj, Unreadable) else (file, number, obj)


def _documents(file: Path, lines: Iterator[bytes], plain: bool, select: Any = None) -> Iterator[Any]:
    for number, (first_line, body, bad_at) in enumerate(stream_documents(lines), 1):
        if select is None or select(body):
            yield from _parse(file, number, first_line, body, bad_at, plain)


def _loaded(got: Iterator[Any], plain: bool) -> Loaded:
    objects: list[tuple[Path, int, dict]] = []
    unreadable: list[Unreadable] = []
    for g in got:
        (unreadable if isinstance(g, Unreadable) else objects).append(g)
    return Loaded(objects, unreadable, plain)


def read_text(file: Path, text: str, plain: bool = False) -> Loaded:
    """`read` of a text held in memory (tests, small inputs)."""
    return _loaded(_documents(file, _lines(text.encode("utf-8")), plain), plain)


def read(paths: list[Path], plain: bool = False) -> Loaded:
    """Every Kubernetes object in `paths` (files, `-` for stdin, or folders searched for .yaml/.yml), and every
    document or file that could not be read. With `plain`, whole-number floats (`replicas: 2.0`) are read as
    ints, what the policy engine's normalize makes of them: the walk that checks a document's shape does it on
    the way, so the linter judges what it read without walking every object again."""
    return _loaded(iter_read(paths, plain), plain)


def _content(body: str) -> bool:
    return any(ln.strip() and not ln.lstrip().startswith(("#", "%")) for ln in body.splitlines())


def _marker(line: bytes) -> bytes | None:
    """A document marker (`---`, `...`) at column 0: it ends a document wherever it stands, even inside a quoted
    scalar (YAML 1.2 section 9.1.4), so splitting on them finds the same documents the parser would."""
    if line[:3] in (b"---", b"...") and (len(line) == 3 or line[3:4] in (b" ", b"\t", b"\r", b"\n")):
        return line[:3]
    return None


def stream_documents(lines: Iterator[bytes]) -> Iterator[tuple[int, str, int | None]]:
    """The documents of a UTF-8 file read line by line, holding one at a time: (first line, text, offset in the text
    of the file's first byte that is not UTF-8, when this document holds it) for each document between markers that
    holds more than blanks, comments and directives. A marker (`---`, `...`) at column 0 ends a document wherever it
    stands; `--- {inline}` keeps what follows it on its line, `...` ends the document and nothing follows. Bytes that
    are not UTF-8 are replaced, and the first of them is reported in its document (later ones decode replaced)."""
    parts: list[str] = []
    size, start, bad, bad_at = 0, 0, False, None
    for index, raw in enumerate(lines):
        line = raw[3:] if index == 0 and raw.startswith(b"\xef\xbb\xbf") else raw
        marker = _marker(line)
        if marker is not None:
            body = "".join(parts)
            if _content(body):
                yield start, body, bad_at
            if marker == b"...":  # the rest of its line belongs to no document, but its bytes count
                try:
                    line[3:].decode("utf-8")
                except UnicodeDecodeError:
                    bad = True
            rest = line[3:] if marker == b"---" else (b"\n" if line.endswith(b"\n") else b"")
            parts, size, start, bad_at = [], 0, index, None
            line = rest
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            text = line[: err.start].decode("utf-8") + line[err.start :].decode("utf-8", "replace")
            if not bad:
                bad, bad_at = True, size + len(line[: err.start].decode("utf-8"))
        parts.append(text)
        size += len(text)
    body = "".join(parts)
    if _content(body):
        yield start, body, bad_at


def iter_read(
    paths: list[Path], plain: bool = False, stdin: bytes | None = None, select: Any = None
) -> Iterator[tuple[Path, int, dict] | Unreadable]:
    """`read`, one document at a time: memory holds a document, not the files. `stdin`: the bytes `-` stands for
    (read once by the caller, so that a second pass sees them again). `select(text)`: parse only the documents
    whose text it accepts (a cheap first pass); the others are skipped, their problems unreported."""
    for f in _files(paths):
        if str(f) == "-":
            yield from _documents(f, _lines(stdin if stdin is not None else sys.stdin.buffer.read()), plain, select)
            continue
        if not f.exists():
            yield Unreadable(f, None, None, "no such file or folder")
            continue
        try:
            with open(f, "rb") as handle:
                if handle.read(2) in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16: re-encoded whole (rare, small)
                    yield from _documents(f, _lines(f.read_bytes()), plain, select)
                    continue
                handle.seek(0)
                yield from _documents(f, iter(handle), plain, select)
        except OSError as err:
            yield Unreadable(f, None, None, f"cannot read: {err.strerror or err}")


def load(paths: list[Path]) -> list[tuple[Path, dict]]:
    """(file, object) for every Kubernetes object in `paths`; raises ManifestError if any document is
    unreadable."""
    got = read(paths)
    if got.unreadable:
        raise ManifestError(got.unreadable)
    return [(f, obj) for f, _, obj in got.objects]
