"""Generate docs/config.md, the stack config reference, from the pydantic models and their field docstrings.

    python -m tools.gendocs [--check]
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from components import config

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "config.md"


def _type(ann: object) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [_type(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" (optional)" if type(None) in args else "")
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"[{ann.__name__}](#{ann.__name__.lower()})"
    return getattr(ann, "__name__", str(ann)).replace("IPv4Network", "IPv4 CIDR")


def _models(ann: object) -> list[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for a in typing.get_args(ann) for m in _models(a)]


def generate() -> str:
    lines = ["# Stack config reference", "",
             "Generated from `components/config.py` by `python -m tools.gendocs`; do not edit by hand.", "",
             "A stack file `stacks/Pulumi.<stack>.yaml` sets two keys: `fastpath:platform`, one "
             "[PlatformConfig](#platformconfig) describing the cluster, and `fastpath:jobs`, a list of "
             "[JobSpec](#jobspec) "
             "(may be absent). Unknown keys are refused.", ""]
    seen: list[type[BaseModel]] = []
    queue: list[type[BaseModel]] = [config.PlatformConfig, config.JobSpec]
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.append(model)
        lines += [f"## {model.__name__}", ""]
        if model.__doc__ and model is not config.PlatformConfig:
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| key | type | meaning and default |", "|---|---|---|"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            desc = " ".join((field.description or "").split()).replace("|", "\\|")
            lines.append(f"| `{key}` | {_type(field.annotation)} | {desc} |")
            queue += _models(field.annotation)
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gendocs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/config.md is out of date")
    args = ap.parse_args(argv)
    text = generate()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print("docs/config.md is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
