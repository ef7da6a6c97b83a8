"""A container's command and args as the shell would split them: launcher scripts (`sh -c "mpirun -x ..."`) are
read word by word by the rules that look for flags and exported variables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# shlex.split's grammar (POSIX mode, no comments): a word is a run of plain characters, '...' and "..." strings
# and backslash escapes; the four characters of shlex's whitespace separate words. What starts no word (an unclosed
# quote, a trailing backslash) is `bad`. Possessive quantifiers: what a run matched is never given back, so an
# unclosed quote ends the word at once instead of making the engine retry other splits of it.
SHELL_WORD = re.compile(
    r"""(?P<word>(?:[^ \t\r\n'"\\]++|'[^']*+'|"[^"\\]*+(?:\\.[^"\\]*+)*+"|\\.)++)"""
    r"""|(?P<bad>[^ \t\r\n])""",
    re.S,
)
SHELL_PART = re.compile(r"""'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"|\\(.)""", re.S)
DOUBLE_QUOTED_ESCAPE = re.compile(r"\\(.)", re.S)
SPACE = re.compile(r"\s")


def _unquote(part: re.Match) -> str:
    single, double, escaped = part.groups()
    if single is not None:
        return single
    if double is not None:  # inside "..." a backslash escapes only `"` and itself
        return DOUBLE_QUOTED_ESCAPE.sub(lambda m: m[1] if m[1] in '"\\' else m[0], double)
    return escaped


def shell_words(text: str) -> list[str]:
    """`shlex.split(text)`, matched by a regex instead of stepped through in Python a character at a time
    (launcher scripts run to kilobytes); ValueError where shlex raises one."""
    return list(_split(text))


@lru_cache(maxsize=1024)  # the MPIJobs of one lint share a few launcher scripts: each is split once
def _split(text: str) -> tuple[str, ...]:
    found = SHELL_WORD.findall(text)
    if any(bad for _, bad in found):
        raise ValueError(f"unclosed quotation or trailing backslash in {text[:40]!r}")
    return tuple(
        SHELL_PART.sub(_unquote, word) if "'" in word or '"' in word or "\\" in word else word for word, _ in found
    )


def argv(c: dict) -> list[str]:
    """A container's command and args as words; a `sh -c "..."` script is split the way the shell would."""
    return command_words([*(c.get("command") or []), *(c.get("args") or [])])


def command_words(line: Iterable[object]) -> list[str]:
    """A command line's words, each argument that holds whitespace split the way the shell would."""
    words: list[str] = []
    for w in line:
        w = str(w)
        if not SPACE.search(w):
            words.append(w)
            continue
        try:
            words += _split(w)
        except ValueError:
            words += w.split()
    return words
