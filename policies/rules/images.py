"""Images: every container runs a pinned image, so every node of a job runs the same build."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from components.model.base import image_problem
from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import PLACEHOLDER, containers, where

# Image tags that move: whatever is pushed next runs. A word of the tag (split on - . _) names a branch or a
# channel, and no other word carries a version number or a commit (`nightly-2024-06-01`, `main-3f2a9c1` are
# pinned enough); `latest` moves whatever surrounds it.
MOVING_TAG_WORDS = {
    "latest",
    "nightly",
    "main",
    "master",
    "dev",
    "develop",
    "edge",
    "head",
    "canary",
    "unstable",
    "rolling",
    "stable",
    "current",
    "trunk",
}


@lru_cache(maxsize=4096)  # a lint meets a handful of distinct images, in thousands of containers
def moving_tag(image: str) -> str | None:
    """The tag of `image` if it moves (`latest`, `latest-gpu`, `nightly`, `main`, ...), else None."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    tag = last.rsplit(":", 1)[1]
    words = [w for w in re.split(r"[-._]", tag.lower()) if w]
    if "latest" in words:
        return tag
    if any(w in MOVING_TAG_WORDS for w in words) and not any(re.search(r"\d", w) for w in words):
        return tag
    if not re.search(r"\d", tag):
        # No version and no commit in it (`openmpi`, `slim`, `jammy`, `gpu-lammps-hwloc`): a name its publisher
        # builds again under the same tag.
        return tag
    return None


UPPERCASE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@lru_cache(maxsize=4096)
def templated_image(image: str) -> bool:
    """Whether a template fills in what decides pinning: the tag (or digest), or the whole reference when no
    literal tag follows (`${IMAGE_URI}`). `gcr.io/<project>/app:latest` has a literal tag and is judged."""
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last and "@" not in image else None
    if tag is not None and not PLACEHOLDER.search(tag):
        return False
    if tag is None and "@" not in image and UPPERCASE_NAME.fullmatch(image):
        # `PLACEHOLDER`, `IMAGE`, `YOUR_IMAGE`: repository names are lowercase (distribution/reference grammar), so
        # an upper-case word is a slot for a CI job or a reader to fill, not an image.
        return True
    return bool(PLACEHOLDER.search(image)) and "@sha256:" not in image


# components.model.base.image_problem, once per distinct image (it is also the stack schema's check).
pinning_problem = lru_cache(maxsize=4096)(image_problem)


@rule(
    "image-pinned",
    "Images are pinned",
    level=MANDATORY,
    description="Every container image has a version tag or digest: never none, never a tag that moves (`latest`, "
    "`latest-gpu`, `nightly`, `main`, `master`, `stable`, ... unless another word of the tag carries a "
    "version or commit, as in `nightly-2024-06-01`), nor a tag with no digit at all (`openmpi`, `slim`: a name "
    "rebuilt under the same tag).",
    remediation="pin a version tag or an @sha256 digest",
    trainer_alone=True,
)
def image_pinned(ctx: Context) -> Iterator[Finding]:
    # A TrainJob judged without its runtime is only its spec.trainer (policies/podspecs.py _train_job).
    trainer_alone = ctx.obj.get("kind") == "TrainJob" and (ctx.pairing is None or ctx.pairing.effective is None)
    for t in ctx.templates:
        for c in [*containers(t), *(t.template["spec"].get("initContainers") or [])]:
            image = str(c.get("image") or "").strip()
            if not image:
                if trainer_alone:
                    continue  # spec.trainer.image is optional: the runtime's container image stays
                yield Finding(f"{where(t, c)} has no image")
            elif templated_image(image):
                continue  # filled in later: judgeable says it could not be judged
            elif (p := pinning_problem(image)) is not None:
                yield Finding(f"{where(t, c)}: {p}")
            elif (tag := moving_tag(image)) is not None:
                yield Finding(
                    f"{where(t, c)}: image {image!r} uses the moving tag `{tag}`: each pull may bring "
                    "a different build (nodes of one job can run different code); pin a version tag or "
                    "an @sha256 digest"
                )
