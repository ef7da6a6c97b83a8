"""fastpath: one cluster's GPU training platform, and the jobs its stack file declares."""

import pulumi

from components import config
from components.platform import Platform, PlatformArgs

try:
    # Everything is validated before the first resource is registered: a bad stack file registers nothing.
    cfg = config.from_pulumi()
except config.ConfigError as err:
    # RunError ends the program with the message alone, no Python traceback.
    raise pulumi.RunError(str(err)) from None

platform = Platform("fastpath", PlatformArgs(platform=cfg.platform))
pulumi.export("profile", platform.profile)
