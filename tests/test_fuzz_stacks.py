"""Property: any stack file is either refused before a resource is registered, every line naming the file and a
key path, or it renders to objects that pass the upstream schemas and the policy pack's mandatory rules. Stack
files are the committed ones mutated at random (a value replaced by another type, a number pushed to a bound, a
string made long, odd or empty, a key removed or misspelt). `make test` runs a few derandomized examples; `make
fuzz` runs FASTPATH_FUZZ_EXAMPLES (1000) random ones."""

import copy
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.model.config import ConfigError
from components.model.stack import parse
from tests.conftest import STACKS, schema_problems
from tests.helpers import stack_raw
from tools import render, upstream

EXAMPLES = int(os.environ.get("FASTPATH_FUZZ_EXAMPLES", "12"))
RANDOM = bool(os.environ.get("FASTPATH_FUZZ_EXAMPLES"))


def paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, (*prefix, i))


WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0, 2**31, 2**63, 10**12, 65536, 127, 128]),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([8.0, 0.5, 1e300]),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "x" * 300,
            "Training",
            "kube-system",
            "-a",
            "a b",
            "é",
            "nvidia.com/gpu",
            "10.0.0.0/8",
            "=eth0",
            "latest",
            "/dev/shm",
            "NVIDIA A100-SXM4-80GB",
            "python",
            "mlx5_0",
            "1Ti",
            "$N",
            "{{ x }}",
        ]
    ),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=6), st.text(max_size=4), max_size=2),
)


def plausible(value):
    """A value a person might have typed instead: same type, near a bound, or a neighbouring choice."""
    if isinstance(value, bool):
        return st.just(not value)
    if isinstance(value, int):
        return st.sampled_from(sorted({value - 1, value + 1, value * 2, value // 2, 0, 1, 2, 4, 8, 16, 2**31 - 1}))
    if isinstance(value, str):
        return st.sampled_from(
            [
                value.upper(),
                value + "-2",
                value[:1],
                " " + value,
                value.replace("-", "_"),
                "eth0",
                "ens3",
                "training",
                "research",
                "sriov",
                "shared",
                "hostdevice",
                "hostnetwork",
                "rdma-only",
                "v1",
                "v2",
                "both",
                "roce",
                "infiniband",
                "efa",
                "tcp",
                "mpi",
                "tensorflow",
                "dmabuf",
                "peermem",
                "none",
            ]
        )
    if isinstance(value, list):
        return st.sampled_from([value[:1], value * 2, []]) if value else st.just([])
    if isinstance(value, dict):
        return st.just({k: v for i, (k, v) in enumerate(value.items()) if i % 2 == 0})
    return WEIRD


@st.composite
def mutated(draw):
    stack = draw(st.sampled_from(STACKS))
    raw = copy.deepcopy(stack_raw(stack))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(raw) if p]
        if not candidates:  # everything deleted already: an empty stack file is a case of its own
            break
        path = draw(st.sampled_from(candidates))
        parent = raw
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["plausible", "plausible", "plausible", "weird", "delete", "misspell"]))
        if action == "delete" and isinstance(parent, dict):
            parent.pop(path[-1])
        elif action == "misspell" and isinstance(parent, dict) and isinstance(path[-1], str):
            parent[path[-1] + "x"] = parent.pop(path[-1])
        elif action == "plausible":
            parent[path[-1]] = draw(plausible(parent[path[-1]]))
        else:
            parent[path[-1]] = draw(WEIRD)
    return stack, raw


def judge(stack: str, raw: dict) -> None:
    source = f"stacks/Pulumi.{stack}.yaml"
    try:
        parse(raw, source)
    except ConfigError as err:
        lines = str(err).splitlines()
        assert lines and all(line.startswith(f"{source}: fastpath:") or line.startswith(f"{source}: ...") for line in lines), str(err)
        return
    extra = {f"fastpath:{k}": v for k, v in raw.items()}
    try:
        run = render.run_program(stack, extra_config=extra)
    except render.RenderError as err:  # refused inside the program (e.g. a job's file): still one clear line
        assert str(err).startswith(source), str(err)
        return
    from tools.lint import lint

    objs = render.manifests(run)
    if upstream.available("crds"):
        bad = {f"{o['kind']}/{o['metadata'].get('name')}": e for o in objs if (e := schema_problems(o))}
        assert not bad, bad
    mandatory = [v for v in lint(objs) if v.level == "mandatory"]
    assert not mandatory, mandatory


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_any_stack_is_refused_with_a_key_or_renders_clean(case):
    judge(*case)


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stacks_render_clean(stack):
    judge(stack, stack_raw(stack))
