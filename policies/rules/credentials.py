"""Credentials: tokens and keys come from Secrets, never from literals in the manifest."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from policies.engine import MANDATORY, Context, Finding, rule
from policies.pods import PLACEHOLDER, containers, where

TOKEN_VALUE = re.compile(
    r"^(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|glpat-[\w-]{16,}"
    r"|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[\w-]{10,}|eyJ[\w-]{20,}\.[\w-]+\.[\w-]+)$"
)
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)")


@lru_cache(maxsize=4096)  # a lint meets a few hundred distinct variables, in thousands of containers
def credential(name: str, value: str) -> str | None:
    """`template` when a secret-named variable is filled in by a template, `literal` when the value is a
    credential written out (a token's shape, or any value of a secret-named variable), else None."""
    if SECRET_NAME.search(name) and PLACEHOLDER.fullmatch(value.strip()):
        return "template"
    if TOKEN_VALUE.match(value.strip()) or (SECRET_NAME.search(name) and len(value.strip()) >= 8):
        return "literal"
    return None


@rule(
    "env-no-secrets",
    "No credentials in env literals",
    level=MANDATORY,
    description="Env values that look like tokens or keys (or secret-named variables with literal values, including "
    "`${HF_TOKEN}` placeholders a template fills in) must come from secretKeyRef.",
    remediation="use valueFrom.secretKeyRef",
    trainer_alone=True,
)
def env_no_secrets(ctx: Context) -> Iterator[Finding]:
    for t in ctx.templates:
        for c in containers(t):
            for name, value in ctx.facts(c).env.items():
                found = credential(name, value)
                if found == "template":
                    yield Finding(
                        f"{where(t, c)}: env {name} is filled in from {value.strip()} when the manifest is "
                        "rendered, so the credential then sits in the object for anyone who can read it; "
                        "use valueFrom.secretKeyRef"
                    )
                elif found == "literal":
                    yield Finding(
                        f"{where(t, c)}: env {name} holds a literal credential: anyone who can read the "
                        "manifest has it; use valueFrom.secretKeyRef"
                    )
