"""What going from one state of a stack to another does to the running cluster (`make diff`).

    python -m tools.impact OLD NEW [--format text|markdown|json]

OLD and NEW are each a stack file (stacks/Pulumi.<stack>.yaml, or any file with its `config:`), a render folder
(rendered/<stack>, its state.json) or a state file (a state.json, or `pulumi stack output state --json` saved).
The classes, consequences and upstream references are components/impact/model.py's; the acknowledgments a
disruptive change needs are listed as the stack file would carry them. Exit 0; 2 for an input it cannot read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from components.impact import ack
from components.impact.model import NEEDS_ACK, Impact, impact
from components.impact.state import snapshot
from components.model import config as config_model
from components.model import stack
from tools.render import STATE_FILE, RenderError, load_stack_file


class InputError(Exception):
    pass


def state_of(path: Path) -> dict[str, Any]:
    """The state a stack file, a render folder or a state file describes."""
    if path.is_dir():
        path = path / STATE_FILE
    if not path.is_file():
        raise InputError(f"{path}: no such file (a stack file, a render folder or a state.json)")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise InputError(f"{path}: not JSON: {err}") from None
    try:
        config, _ = load_stack_file(path)  # as the CLI hands the program its config
        raw = {k.split(":", 1)[1]: stack.decode(v) for k, v in config.items() if k.startswith(f"{stack.NAMESPACE}:")}
        cfg = stack.parse(raw, str(path))
    except (config_model.ConfigError, RenderError) as err:
        raise InputError(str(err)) from None
    return snapshot(cfg.platform, cfg.jobs)


def text(imp: Impact) -> str:
    if imp.first:
        return "no previous state: a first deployment, nothing of this stack runs yet"
    if not imp.changes:
        return "no change a controller acts on"
    lines = [f"worst: {imp.worst}"]
    for c in imp.changes:
        lines.append(f"- {c.cls} `{c.id}`: {c.what}")
        lines.append(f"    {c.consequence}")
        lines.append(f"    upstream: {'; '.join(c.upstream)}")
        if c.keys:
            lines.append(f"    stack keys: {', '.join(c.keys)}")
    needs = [c for c in imp.changes if c.cls in NEEDS_ACK]
    if needs:
        lines.append(f"to apply it, the stack file acknowledges:\n  {ack.KEY}:")
        lines += [f"    {c.id}: {ack.ack_value(c)}" for c in needs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.impact", description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="what runs now: stack file, render folder or state.json")
    ap.add_argument("new", type=Path, help="what it becomes: stack file, render folder or state.json")
    ap.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    args = ap.parse_args(argv)
    try:
        imp = impact(state_of(args.old), state_of(args.new))
    except InputError as err:
        print(err, file=sys.stderr)
        return 2
    match args.format:
        case "text":
            print(text(imp))
        case "markdown":
            print(ack.markdown(imp, f"`{args.old}`"), end="")
        case "json":
            print(
                json.dumps(
                    {"worst": imp.worst, "first": imp.first, "changes": [asdict(c) for c in imp.changes]}, indent=1
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
