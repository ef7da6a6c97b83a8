"""fastpath's CrossGuard policy pack: `pulumi preview --policy-pack policies`.

The rules live in policies/rules/ (pure functions, also run offline by `python -m tools.lint`).
"""

import sys
from pathlib import Path

# The pack runs from policies/; the rules import the shared NCCL catalogue from components/ one level up.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.pack import policies  # noqa: E402

PolicyPack(name="fastpath", enforcement_level=EnforcementLevel.ADVISORY, policies=policies())
