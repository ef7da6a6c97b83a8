"""fastpath: one cluster's GPU training platform, and the jobs its stack file declares."""

import pulumi

from components import config
from components.acceptance import FabricAcceptance, FabricAcceptanceArgs
from components.platform import Platform, PlatformArgs
from components.training_job import TrainingJob, TrainingJobArgs

try:
    # Everything is validated before the first resource is registered: a bad stack file registers nothing.
    cfg = config.from_pulumi()
except config.ConfigError as err:
    # RunError ends the program with the message alone, no Python traceback.
    raise pulumi.RunError(str(err)) from None

platform = Platform("fastpath", PlatformArgs(platform=cfg.platform))
# Jobs wait for the whole platform: their CRDs come with the Training Operator, their queues with Volcano.
jobs = [TrainingJob(spec.name, TrainingJobArgs(spec=spec, profile=platform.profile),
                    pulumi.ResourceOptions(depends_on=[platform]))
        for spec in cfg.jobs]
if cfg.platform.acceptance.enabled:
    acceptance = FabricAcceptance("acceptance", FabricAcceptanceArgs(cfg.platform.acceptance, platform.profile),
                                  pulumi.ResourceOptions(depends_on=[platform]))
    pulumi.export("acceptance", acceptance.runs)
pulumi.export("profile", platform.profile)
pulumi.export("jobs", {job.contract["job"]: job.contract for job in jobs})
