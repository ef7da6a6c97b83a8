"""The shell programs pods run: POSIX sh files beside the module that ships them (`make lint` runs shellcheck on
each), read once at import into the text a container runs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

PLACEHOLDER = re.compile(r"__([A-Z][A-Z0-9_]*)__")


def program(path: Path, values: Mapping[str, object] | None = None) -> str:
    """The program at `path` as a container runs it: comment lines (the why, shellcheck's directives) dropped, so
    they never reach a manifest, and each __NAME__ replaced by values[NAME]. A comment line is one whose first
    non-blank character is #: a program holds no such line inside a quoted string or here-document, where it
    would be data."""
    given = values or {}
    lines = path.read_text().splitlines(keepends=True)
    text = "".join(line for line in lines if not line.lstrip().startswith("#"))
    if unknown := set(PLACEHOLDER.findall(text)) - set(given):
        raise ValueError(f"{path.name}: no value for {', '.join(sorted(unknown))}")
    return PLACEHOLDER.sub(lambda m: str(given[m.group(1)]), text)
