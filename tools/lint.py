"""Lint Kubernetes manifests with fastpath's policy rules, without the Pulumi engine.

    python -m tools.lint PATH... [--config FILE] [--format text|json]

PATH is a YAML file (multi-document; `-` reads stdin) or a folder (every .yaml/.yml below it). `kind: List`s
(nested ones too) and AppWrappers are unwrapped; documents without a `kind` are not Kubernetes objects and are
skipped. Files are read a document at a time (a 50 MB manifest lints in under 40 MB of memory).

Output: one line per violation, `rule level kind/namespace/name: message` (or a JSON list with --format json) on
stdout. What could not be read goes to stderr, one line each, `file: document N, line L: what to do`: bytes that
are not UTF-8, YAML errors, Helm templates (`{{ ... }}`: render them first), alias bombs. The run goes on with
the other documents and files. Things the rules could not judge inside a readable object (a `$GPUS` count, an
unknown kind requesting GPUs, `Master: null`) are advisory findings of the `judgeable` rule. A TrainJob is judged
by the pods its runtime gives it when the ClusterTrainingRuntime (or the TrainingRuntime in its namespace) is among
the PATHs; otherwise `trainjob-runtime` names the runtime it could not see (advisory): lint the two together.

--config FILE is CrossGuard's policy-pack config (`pulumi preview --policy-pack-config`), JSON or YAML: a
mapping of policy name (a rule id, `<id>-advisory` for a mixed rule's advisory findings, or `all`) to an
enforcement level string (`"shm-size": "disabled"`) or an object (`{"enforcementLevel": "advisory",
"minGiBPerGpu": 2, "exemptNamespaces": [...], "exemptLabels": {...}}`). `all` sets every policy's level; each
policy's own entry wins over it. Levels: advisory, mandatory, remediate, disabled. Unknown policy names and
settings are refused with the nearest known one.

Exit status, first match wins:
  2  usage or config error (nothing was linted)
  1  a violation at level mandatory, or remediate (offline nothing remediates), in anything that was read
  2  some file or document could not be read (or the linter failed on an object), and nothing was mandatory
  0  everything was read; advisory findings only, or none
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from policies.config import ConfigError, parse_config
from policies.engine import MANDATORY, REMEDIATE, Violation, claim_index, evaluate, normalize, plan
from policies.runtimes import RuntimeIndex
from tools import yamlsafe
from tools.manifests import Loaded, Unreadable, iter_read, load, read

__all__ = ["ConfigError", "Violation", "lint", "lint_loaded", "lint_paths", "load", "load_config", "main", "read"]
FAILING = (MANDATORY, REMEDIATE)


def lint(objects: list[dict], config: dict | None = None) -> list[Violation]:
    """Every violation of `objects` under `config` (CrossGuard format; ConfigError if it is not valid)."""
    checks = plan(parse_config(config))
    objects = [normalize(obj) for obj in objects]  # once, before the claims and runtimes are indexed
    claims, runtimes = claim_index(objects), RuntimeIndex(objects)
    return [v for obj in objects for v in evaluate(obj, claims=claims, checks=checks, runtimes=runtimes, plain=True)]


def lint_loaded(loaded: Loaded, config: dict | None = None) -> tuple[list[Violation], list[Unreadable]]:
    """Violations of everything read, and what could not be read or judged. An object the linter fails on (a
    bug: the rules are meant to read any shape) is reported as unjudged, and the run goes on."""
    checks = plan(parse_config(config))
    objects = [obj if loaded.plain else normalize(obj) for _, _, obj in loaded.objects]
    claims, runtimes = claim_index(objects), RuntimeIndex(objects)  # once: every TrainJob looks its runtime up
    violations, problems = [], list(loaded.unreadable)
    for (file, number, _), obj in zip(loaded.objects, objects, strict=True):
        try:
            violations += evaluate(obj, claims=claims, checks=checks, runtimes=runtimes, plain=True)
        except Exception as err:  # the safety net: never a traceback, always the document that caused it
            problems.append(_failed_on(file, number, obj, err))
    return violations, problems


# Kinds another object's rules read (claim_index, RuntimeIndex): the first pass of lint_paths parses only the
# documents that name one, a substring test on their text.
INDEXED = (
    "PersistentVolumeClaim",
    "TrainingRuntime",
    "LocalQueue",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "DeviceClass",
    "ComputeDomain",
)


def lint_paths(paths: list[Path], config: dict | None = None) -> tuple[list[Violation], list[Unreadable]]:
    """lint_loaded(read(paths)), streamed: a first pass keeps the claims and runtimes other objects are judged with,
    a second judges one document at a time. Memory holds a document and the findings, not the files (a 50 MB
    manifest is not 500 MB of objects)."""
    checks = plan(parse_config(config))
    stdin = sys.stdin.buffer.read() if any(str(p) == "-" for p in paths) else None
    indexed = [
        got[2]
        for got in iter_read(paths, plain=True, stdin=stdin, select=lambda text: any(k in text for k in INDEXED))
        if not isinstance(got, Unreadable)
    ]
    claims, runtimes = claim_index(indexed), RuntimeIndex(indexed)
    violations: list[Violation] = []
    unreadable: list[Unreadable] = []
    failed: list[Unreadable] = []
    for got in iter_read(paths, plain=True, stdin=stdin):
        if isinstance(got, Unreadable):
            unreadable.append(got)
            continue
        file, number, obj = got
        try:
            violations += evaluate(obj, claims=claims, checks=checks, runtimes=runtimes, plain=True)
        except Exception as err:  # the safety net, as in lint_loaded
            failed.append(_failed_on(file, number, obj, err))
    return violations, unreadable + failed


def _failed_on(file: Path, number: int, obj: dict, err: Exception) -> Unreadable:
    md = obj.get("metadata")
    md = md if isinstance(md, dict) else {}
    return Unreadable(
        file,
        number,
        None,
        f"{obj.get('kind')}/{md.get('name')}: the linter failed on it ({type(err).__name__}: {str(err)[:200]}); not "
        "judged (a linter bug: report it with this document)",
    )


def load_config(path: Path) -> dict:
    """A policy config file, checked: ConfigError naming the file when it cannot be used."""
    try:
        raw = yamlsafe.load(path.read_bytes().decode("utf-8-sig"))  # JSON is YAML
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    except yamlsafe.Refused as err:
        raise ConfigError(f"{path}: {err}") from None
    except (UnicodeDecodeError, yaml.YAMLError, ValueError) as err:
        raise ConfigError(f"{path}: not valid JSON or YAML: {str(err).splitlines()[0]}") from None
    try:
        return parse_config(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def format_text(violations: list[Violation]) -> str:
    return "".join(f"{v.rule} {v.level} {v.kind}/{v.namespace or '-'}/{v.name}: {v.message}\n" for v in violations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.lint",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("paths", nargs="+", type=Path, help="YAML files, folders, or - for stdin")
    ap.add_argument("--config", type=Path, help="policy config (JSON or YAML), CrossGuard's format")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args(argv)
    try:
        config = load_config(args.config) if args.config else None
    except ConfigError as err:
        print(f"config: {err}", file=sys.stderr)
        return 2
    violations, problems = lint_paths(args.paths, config)
    if args.format == "json":
        print(json.dumps([v.as_dict() for v in violations], indent=2))
    else:
        sys.stdout.write(format_text(violations))
    for p in problems:
        print(p, file=sys.stderr)
    if any(v.level in FAILING for v in violations):
        return 1
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
