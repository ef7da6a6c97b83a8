"""fastpath: one cluster's GPU training platform, and the jobs its stack file declares."""

from typing import cast

import pulumi

from components.impact import preview
from components.jobs import existing
from components.jobs.acceptance import FabricAcceptance, FabricAcceptanceArgs
from components.jobs.checks import api_of
from components.jobs.component import TrainingJob, TrainingJobArgs
from components.model import config, stack
from components.platform import mirrors, training_operator
from components.platform.component import Platform, PlatformArgs, left_on_destroy

try:
    # Everything is validated before the first resource is registered: a bad stack file registers nothing.
    cfg = stack.from_pulumi()
except config.ConfigError as err:
    # RunError ends the program with the message alone, no Python traceback.
    raise pulumi.RunError(str(err)) from None
except Exception as err:  # noqa: BLE001 - a value nothing above expected: still one line naming the file
    raise pulumi.RunError(
        f"{stack.stack_file(pulumi.get_stack())}: could not read the stack config: "
        f"{type(err).__name__}: {str(err)[:300]}"
    ) from None

# What this update does to the running cluster, against the last deployment: warnings, and a stop before any
# cluster resource for a change that drains, reboots or deletes unless the stack file acknowledges it.
state, _ = preview.check(cfg, stack.stack_file(pulumi.get_stack()))

if cfg.platform.training_operator_enabled:
    # Before the first registration: a CLI that would drop the overlay's alias, or no `git` for its fetch, must
    # stop the update before anything is applied, not halfway through it.
    training_operator.require_engine()
platform = Platform("fastpath", PlatformArgs(platform=cfg.platform))
# Jobs wait for the whole platform (their queues come with Volcano, the checkpoint claim with storage),
# and only the Training Operator's own objects (CRDs, webhook, a ready Deployment) say it can take a job.
# A TrainJob (v2) instead waits for the runtimes it may name.


def job_dependencies(spec: stack.JobSpec) -> pulumi.Output[list[pulumi.Resource]]:
    deps = platform.trainjob_dependencies if api_of(spec, platform.profile) == "v2" else platform.job_dependencies
    # A Secret or claim the job uses is read from the cluster first: a missing one fails the preview.
    needs = existing.reads(spec, spec.namespace or cfg.platform.training_namespaces[0])
    return pulumi.Output.from_input(deps).apply(lambda d: [*cast(list[pulumi.Resource], d), *needs])


jobs = [
    TrainingJob(
        spec.name,
        TrainingJobArgs(spec=spec, profile=platform.profile),
        pulumi.ResourceOptions(depends_on=job_dependencies(spec)),
    )
    for spec in cfg.jobs
]
if cfg.platform.acceptance.enabled:
    acceptance = FabricAcceptance(
        "acceptance",
        FabricAcceptanceArgs(cfg.platform.acceptance, platform.profile),
        pulumi.ResourceOptions(
            depends_on=platform.trainjob_dependencies if cfg.platform.job_api == "v2" else platform.job_dependencies
        ),
    )
    pulumi.export("acceptance", acceptance.runs)
pulumi.export("profile", platform.profile.to_data())
pulumi.export(preview.STATE_OUTPUT, state)
pulumi.export("leftOnDestroy", left_on_destroy(cfg.platform))
# Images no object names because an operator picks them from the nodes (rendered/<stack>/images.txt lists them).
pulumi.export("derivedImages", mirrors.derived_images(cfg.platform))
pulumi.export("jobs", {job.contract["job"]: job.contract for job in jobs})
