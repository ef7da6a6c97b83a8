"""Generated docs stay in step with the code, and every config key is documented."""

from pathlib import Path

import pytest
from pydantic import BaseModel

from components.model import config, job, stack
from tools import gendocs, render

MODELS = [
    m for module in (config, job, stack) for m in vars(module).values() if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == module.__name__ and not m.__name__.startswith("_")
]


def test_config_reference_is_current():
    assert gendocs.OUT.read_text() == gendocs.generate(), "docs/config.md is stale: run `make docs`"


def test_policy_catalogue_is_current():
    assert gendocs.POLICIES_OUT.read_text() == gendocs.generate_policies(), "policies/README.md is stale: make docs"


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
def test_every_config_field_has_a_docstring(model):
    undocumented = [n for n, f in model.model_fields.items() if not (f.description or "").strip()]
    if model is stack.StackConfig:
        pytest.skip("StackConfig is the top-level keys, documented in the reference's preamble")
    assert undocumented == []


def test_readme_describes_every_stack():
    """A new cluster stack gets its line in README's stacks table, where a reader looks for what each stack is."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("## Stacks", 1)[1].split("\n## ", 1)[0]
    described = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert described == set(render.stack_names()), "README.md ## Stacks: one row per stacks/Pulumi.<stack>.yaml"


def test_the_readmes_offline_python_example_runs_as_written():
    """README's offline route from a stack file to a job's manifest, executed as printed."""
    import re  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "profile_of_stack_file" in b]
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    job = scope["job"]
    assert job["kind"] == "PyTorchJob" and job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
