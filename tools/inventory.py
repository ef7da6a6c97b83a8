"""What a stack's render names that a disconnected cluster would have to mirror: every container image the rendered
objects and the Helm values name (with the digest where pinned), and every chart and kustomize source. Pure.

    images(objects, packages)   sorted image references
    charts(packages)            sorted `repo chart version` lines (kustomize: `source`)

Written as rendered/<stack>/images.txt and charts.txt by tools/render.py, with what each installed chart's operators
may pull at the pinned tags (components/platform/mirrors.py KEYS: a superset, some only with a feature on) and, as
notes, the images whose tags an operator derives per node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from components import versions
from components.platform import mirrors

# An image reference inside any string (a flag's value, a ConfigMap's template, a kustomize patch): a registry host
# with a dot, a path and a tag or digest, not part of a URL.
IMAGE_IN_TEXT = re.compile(
    r"(?<![/\w.-])((?:[a-z0-9-]+\.)+[a-z0-9-]+(?::\d+)?/[a-z0-9._/-]+(?::[\w.-]+|@sha256:[0-9a-f]{64}))"
)


def _walk(node: Any) -> Iterator[dict]:
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield x
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def _strings(node: Any) -> Iterator[str]:
    for d in _walk(node):
        for v in d.values():
            if isinstance(v, str):
                yield v
            elif isinstance(v, list):
                yield from (x for x in v if isinstance(x, str))


def _reference(d: dict) -> str | None:
    """An image a mapping names: `image: ref`, Helm's `{repository, tag | digest}` (with `registry` or `image`), or
    the NicClusterPolicy's `{repository, image, version}`."""
    image = d.get("image")
    repository = d.get("repository")
    if isinstance(repository, str) and repository:
        name = f"{repository}/{image}" if isinstance(image, str) and image and "/" not in image else repository
        if isinstance(d.get("registry"), str) and d["registry"]:
            name = f"{d['registry']}/{name}"
        version = d.get("digest") or d.get("tag") or d.get("version")
        if isinstance(version, str) and version:
            return f"{name}@{version}" if version.startswith("sha256:") else f"{name}:{version}"
        return None
    if isinstance(image, str) and image and ("/" in image or ":" in image):
        return image
    return None


def images(objects: Iterable[dict], packages: Iterable[dict]) -> list[str]:
    found: set[str] = set()
    for node in [*objects, *packages]:
        found.update(ref for d in _walk(node) if (ref := _reference(d)))
        found.update(m for s in _strings(node) if "/" in s for m in IMAGE_IN_TEXT.findall(s))
    for pkg in packages:
        for image in (pkg.get("kustomization") or {}).get("images") or []:
            name, tag = image.get("newName") or image.get("name"), image.get("newTag")
            digest = image.get("digest")
            if name:
                found.add(f"{name}@{digest}" if digest else f"{name}:{tag}" if tag else name)
    return sorted(found)


def chart_images(packages: Iterable[dict], registry: str | None) -> tuple[list[str], list[str]]:
    """What the installed charts pull with fastpath's settings at their own tags (components/platform/mirrors.py
    KEYS), from `registry` when the stack has a mirror; and the images whose tags their operators derive per node,
    as notes."""
    by_name = {chart.rsplit("/", 1)[-1]: chart for chart in mirrors.KEYS}
    found: set[str] = set()
    derived: list[str] = []
    for pkg in packages:
        chart = by_name.get(str(pkg.get("chart", "")).rsplit("/", 1)[-1]) if pkg.get("kind") == "helm" else None
        if chart is None:
            continue
        found.update(mirrors.chart_images(chart, registry))
        if chart in mirrors.DERIVED and _derives(chart, pkg):
            derived.append(mirrors.DERIVED[chart])
    return sorted(found), derived


def _derives(chart: str, pkg: dict) -> bool:
    """Whether the chart's operator runs its derived-tag image with these values (the GPU driver unless
    preinstalled; the DOCA driver is the NicClusterPolicy's, judged by the caller's objects)."""
    values = pkg.get("values") or {}
    if chart == versions.GPU_OPERATOR_CHART:
        return (values.get("driver") or {}).get("enabled", True) is not False
    return True


def charts(packages: Iterable[dict]) -> list[str]:
    out = []
    for pkg in packages:
        if pkg["kind"] == "helm":
            repo = pkg.get("repo") or pkg["chart"].rsplit("/", 1)[0]
            out.append(f"{repo} {pkg['chart'].rsplit('/', 1)[-1]} {pkg['version']}")
        else:
            out.append(f"kustomize {pkg.get('source')}")
    return sorted(out)


def text(lines: list[str], what: str, notes: Iterable[str] = ()) -> str:
    head = f"# {what}: generated by `python -m tools.render`; do not edit.\n"
    return head + "".join(f"# and, tag per node: {n}\n" for n in notes) + "".join(f"{line}\n" for line in lines)
