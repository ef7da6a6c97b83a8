"""Bounded YAML: every YAML the project reads from a person (stack files, manifests, policy configs) goes through
`load`, which composes the document first and refuses, before anything is built, what would hang or mislead a
reader: aliases or merge keys (`<<: [*a, *a]`) that expand to more than MAX_NODES nodes (a 1 KB file can otherwise
take minutes and gigabytes), nesting deeper than MAX_DEPTH, alias cycles, and a key repeated in one mapping (YAML
1.2 forbids it; PyYAML keeps the last one silently). The error is a yaml.YAMLError with the line.
"""

from __future__ import annotations

from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_NODES = 1_000_000  # nodes a document may expand to: a Kubernetes object or a stack file has thousands
MAX_DEPTH = 100
MERGE = "tag:yaml.org,2002:merge"


class Refused(yaml.YAMLError):
    def __init__(self, problem: str, node: yaml.Node | None = None):
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = node.start_mark if node is not None else None

    def __str__(self) -> str:
        at = f" (line {self.problem_mark.line + 1})" if self.problem_mark is not None else ""
        return f"{self.problem}{at}"


def check(root: yaml.Node) -> None:
    """Raise Refused for a node graph a reader should not build. Sizes are memoised per node, so an alias bomb is
    measured without being expanded."""
    memo: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise Refused(f"nested deeper than {MAX_DEPTH} levels", node)
        key = id(node)
        if key in memo:
            return memo[key]
        if key in open_:
            raise Refused("a YAML alias refers to a node that contains it (a cycle): write the value out", node)
        open_.add(key)
        n = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != MERGE:
                    ident = (k.tag, k.value)
                    if ident in seen:
                        raise Refused(
                            f"key {k.value!r} appears twice in one mapping (first on line "
                            f"{seen[ident].start_mark.line + 1}): YAML readers keep only one of them; remove the other",
                            k,
                        )
                    seen[ident] = k
                n += size(k, depth + 1) + size(v, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                n += size(v, depth + 1)
        open_.discard(key)
        memo[key] = n
        if n > MAX_NODES:
            raise Refused(
                f"YAML aliases or merge keys expand this document to more than {MAX_NODES:,} values: write the "
                "values out",
                node,
            )
        return n

    size(root, 0)


def load(text: str) -> Any:
    """One YAML document (None when empty), checked before it is built."""
    loader = LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
