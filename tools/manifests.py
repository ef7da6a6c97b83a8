"""The one manifest loader: multi-document YAML files or folders of them, `kind: List` flattened."""

from __future__ import annotations

from pathlib import Path

import yaml

# libyaml's loader where PyYAML has it: rendered stacks and CRDs are megabytes of YAML.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(paths: list[Path]) -> list[tuple[Path, dict]]:
    """(file, object) for every Kubernetes object in `paths` (files, or folders searched for .yaml/.yml)."""
    files: list[Path] = []
    for p in paths:
        files += sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml")) if p.is_dir() else [p]
    out = []
    for f in files:
        for doc in yaml.load_all(f.read_text(), Loader=LOADER):
            if isinstance(doc, dict) and doc.get("kind") == "List":
                out += [(f, item) for item in doc.get("items") or [] if isinstance(item, dict)]
            elif isinstance(doc, dict) and doc.get("kind"):
                out.append((f, doc))
    return out
