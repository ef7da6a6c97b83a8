"""Lint Kubernetes manifests with fastpath's policy rules, without the Pulumi engine.

    python -m tools.lint PATH... [--config FILE] [--format text|json]

PATH is a YAML file (multi-document) or a folder (every .yaml/.yml below it). --config is a YAML or JSON file
in CrossGuard's policy-config format ({rule-id: {enforcementLevel, <param>, exemptNamespaces, exemptLabels}}),
merged over the pack's defaults. Prints one line per violation; exits 1 when any mandatory rule fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from policies.rules import MANDATORY, Violation, claim_index, evaluate
from tools.manifests import load


def lint(objects: list[dict], config: dict | None = None) -> list[Violation]:
    claims = claim_index(objects)
    return [v for obj in objects for v in evaluate(obj, config, claims)]


def format_text(violations: list[Violation]) -> str:
    return "".join(f"{v.rule} {v.level} {v.kind}/{v.namespace or '-'}/{v.name}: {v.message}\n" for v in violations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.lint", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--config", type=Path, help="policy config (YAML or JSON), CrossGuard format")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    config = yaml.safe_load(args.config.read_text()) if args.config else None
    try:
        objects = [obj for _, obj in load(args.paths)]
    except yaml.YAMLError as err:
        print(f"not valid YAML: {err}", file=sys.stderr)
        return 2
    violations = lint(objects, config)
    if args.format == "json":
        print(json.dumps([v.as_dict() for v in violations], indent=2))
    else:
        sys.stdout.write(format_text(violations))
    return 1 if any(v.level == MANDATORY for v in violations) else 0


if __name__ == "__main__":
    sys.exit(main())
