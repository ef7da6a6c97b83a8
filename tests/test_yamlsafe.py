"""Hostile YAML (issue: a 1 KB file hung the linter and the renderer): every reader of a person's YAML refuses an
alias or merge-key bomb at once, and a repeated key, naming the line. Each bomb runs in a child process with a
timeout, so a reader that regresses fails the test instead of hanging the suite."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MERGE_BOMB = "a0: &a0 {k: v}\n" + "".join(f"a{i}: &a{i}\n  <<: [*a{i - 1}, *a{i - 1}]\n  x{i}: 1\n" for i in range(1, 25))
LAUGHS = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
DUPLICATE = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: []\nkind: Service\n"

# (reader, how the test program calls it on a file F, what it must say)
READERS = {
    "stack file": (
        "from tools.render import load_stack_file, RenderError\ntry:\n    load_stack_file(F)\nexcept RenderError as e:\n    print(e)",
        lambda body: "config:\n  fastpath:platform:\n" + textwrap.indent(body, "    "),
    ),
    "manifest": (
        "from tools.manifests import read\nprint('; '.join(str(u) for u in read([F]).unreadable))",
        lambda body: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n" + textwrap.indent(body, "  "),
    ),
    "policy config": (
        "from tools.lint import load_config\nfrom policies.config import ConfigError\ntry:\n    load_config(F)\nexcept ConfigError as e:\n    print(e)",
        lambda body: body,
    ),
}
BOMBS = {"merge-keys": (MERGE_BOMB, "expand this document to more than"), "billion-laughs": (LAUGHS, "expand this document to more than")}


def run(reader: str, text: str, tmp_path: Path) -> str:
    program, _ = READERS[reader]
    f = tmp_path / "input.yaml"
    f.write_text(text)
    res = subprocess.run(
        [sys.executable, "-c", f"from pathlib import Path\nF = Path({str(f)!r})\n{program}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("bomb", BOMBS)
def test_every_reader_refuses_a_bomb_at_once(reader, bomb, tmp_path):
    body, needle = BOMBS[bomb]
    out = run(reader, READERS[reader][1](body), tmp_path)
    assert needle in out and "line" in out, out


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_refuses_a_repeated_key_with_its_line(reader, tmp_path):
    text = READERS[reader][1]("name: first\nsize: 1\nname: second\n")
    out = run(reader, text, tmp_path)
    assert "key 'name' appears twice in one mapping" in out, out


def test_a_manifest_with_two_kinds_is_refused_not_read_as_the_last(tmp_path):
    from tools.manifests import read  # noqa: PLC0415

    f = tmp_path / "pod.yaml"
    f.write_text(DUPLICATE)
    got = read([f])
    assert not got.objects and "key 'kind' appears twice" in str(got.unreadable[0]) and "line 6" in str(got.unreadable[0])


def test_a_merge_key_still_works_within_bounds():
    from tools import yamlsafe  # noqa: PLC0415

    assert yamlsafe.load("base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\n") == {"base": {"a": 1, "b": 2}, "use": {"a": 1, "b": 3}}
