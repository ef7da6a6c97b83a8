"""Objects a job uses that no stack makes (fastpath:existing): a job naming a Secret or claim that is not declared
is refused before anything is registered (its pods would sit in CreateContainerConfigError or unschedulable,
holding their gang's GPUs); a declared one is read through the provider before the job, so on a real cluster a
preview fails while it is missing."""

import pytest

from components.model import stack
from components.model.config import ConfigError
from tests.helpers import stack_raw

SOURCE = "stacks/Pulumi.prod-ib.yaml"


# (id, edit of the raw stack config, the key path and words the refusal must carry)
BAD = [
    ("secret-not-declared", lambda r: r["existing"].update(secrets=[]), "fastpath:jobs[0].secretEnv.HF_TOKEN.secret: the Secret training/hf-token is not in fastpath:existing.secrets"),
    ("claim-not-declared", lambda r: r["existing"].update(claims=[]), "fastpath:jobs[0].datasets[0].claim: the PersistentVolumeClaim training/pretraining-corpus"),
    ("declared-in-another-namespace", lambda r: r["existing"].update(secrets=["research/hf-token"]), "training/hf-token is not in fastpath:existing.secrets"),
    ("not-namespace-name", lambda r: r["existing"].update(secrets=["hf-token"]), "fastpath:existing: 'hf-token' is not namespace/name"),
    ("unknown-kind", lambda r: r["existing"].update(configmaps=["training/x"]), "fastpath:existing.configmaps: unknown key"),
]


@pytest.mark.parametrize(("edit", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_job_naming_an_object_nobody_declared_is_refused_with_the_fix(edit, needle):
    raw = stack_raw("prod-ib")
    edit(raw)
    with pytest.raises(ConfigError) as err:
        stack.parse(raw, SOURCE)
    assert SOURCE in str(err.value) and needle in str(err.value), str(err.value)


def test_declared_objects_are_read_before_the_jobs_that_use_them(rendered):
    run = rendered("prod-ib").run
    assert sorted(run.reads.values()) == ["training/hf-token", "training/pretraining-corpus"]
    job = next(r for r in run.registrations if r.type == "kubernetes:kubeflow.org/v1:PyTorchJob" and r.name.endswith("llama-pretrain"))
    # The job's component waits for the reads: a missing object fails the preview before the job is sent.
    component = next(r for r in run.registrations if r.urn == job.parent)
    assert set(run.reads) <= set(component.dependencies), component.dependencies
