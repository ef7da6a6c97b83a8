"""Benchmarks (make bench): how rendering scales with the number of jobs, against the Pulumi SDK's own floor;
how fast the linter checks objects; how fast ncclcheck reads a large log.

For N generated jobs on the prod-ib stack, each measurement in a fresh interpreter, from before `import pulumi`
to the last registration done (what a user waits for, startup imports included):
  seconds        the full program (__main__.py) under the mocks of tools/mocks.py;
  floor seconds  the SDK alone registering what that run registered: the same type tokens, names, input
                 properties, parents, dependencies, property dependencies and options, in the same order, and
                 the same invokes, as plain CustomResource / ComponentResource subclasses (no typed
                 properties, aliases or provider defaults) under the same mocks (replay()).
The ratio is what fastpath itself costs on top of the SDK serializing the same objects; the CPU ratio is the same
with the process's CPU time (all threads), steadier than wall time on a machine shared with other work.

The linter: --lint-objects rendered prod-ib objects (platform and jobs, renamed copies), read as `python -m
tools.lint` reads them and judged in process as it judges them (tools.lint.lint_loaded), best of --repeat; objects/s
is reckoned on CPU time, for the same reason.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.manifests import Loaded
    from tools.mocks import Registration

STACK = "prod-ib"
FRAMEWORKS = ("pytorch", "mpi", "tensorflow")
NCCLCHECK_MB = 300
ROOT = Path(__file__).resolve().parents[1]


def generated_jobs(n: int) -> list[dict]:
    jobs = []
    for i in range(n):
        fw = FRAMEWORKS[i % 3]
        job: dict[str, Any] = {
            "name": f"job-{i:04d}",
            "framework": fw,
            "image": "nvcr.io/nvidia/pytorch:25.10-py3",
            "command": ["python", "train.py", "--seed", str(i)],
            "queue": "research",
        }
        if fw == "pytorch" and i % 2:
            job["elastic"] = {"minNodes": 2, "maxNodes": 4 + i % 8}
        else:
            job["nodes"] = 1 + i % 16
        jobs.append(job)
    return jobs


def replay(registrations: list[Registration], invokes: list[tuple[str, dict]]) -> None:
    """A minimal program that makes a Run's invokes and registrations again, as plain resources: the floor. The
    invokes too, so whatever the mock provider does for them weighs on both sides. An input
    the original computed from other resources (an ownerReference's uid) waits on them here too, through one
    Output per property."""
    import pulumi

    # Classes of their own, as every provider's resources are: the SDK records each resource's stack trace from
    # the frame below the third __init__ (Resource, Custom/ComponentResource, the concrete class); the base classes
    # built directly find none and skip the trace, a shortcut no real program takes.
    class Plain(pulumi.CustomResource):
        def __init__(self, t: str, name: str, props: dict, opts: pulumi.ResourceOptions) -> None:
            super().__init__(t, name, props, opts)

    class Group(pulumi.ComponentResource):
        def __init__(self, t: str, name: str, opts: pulumi.ResourceOptions) -> None:
            super().__init__(t, name, None, opts)

    class Remote(pulumi.ComponentResource):
        def __init__(self, t: str, name: str, props: dict, opts: pulumi.ResourceOptions) -> None:
            super().__init__(t, name, props, opts, remote=True)

    for token, args in invokes:
        pulumi.runtime.invoke(token, args)
    made: dict[str, pulumi.Resource] = {}
    res: pulumi.Resource
    for reg in registrations:
        opts = pulumi.ResourceOptions(
            parent=made.get(reg.parent),
            depends_on=[made[d] for d in reg.dependencies if d in made],
            protect=reg.protect,
            retain_on_delete=reg.retain_on_delete,
            replace_on_changes=reg.replace_on_changes or None,
            delete_before_replace=reg.delete_before_replace,
        )
        if reg.remote:
            res = Remote(reg.type, reg.name, dict(reg.inputs), opts)
        elif not reg.custom:
            res = Group(reg.type, reg.name, opts)
            if reg.outputs:
                res.register_outputs(reg.outputs)
        else:
            props = dict(reg.inputs)
            for key, urns in reg.property_dependencies.items():
                deps = [dep.id for u in urns if isinstance(dep := made.get(u), pulumi.CustomResource)]
                if key in props and deps:
                    props[key] = _after(deps, props[key])
            res = Plain(reg.type, reg.name, props, opts)
        made[reg.urn] = res


def _after(ids: list, value: Any) -> Any:
    """`value`, once the resources whose ids these are exist."""
    import pulumi

    return pulumi.Output.all(*ids).apply(lambda _: value)


def _child(what: str, jobs: int, path: Path) -> dict:
    """One measurement in this fresh interpreter. `fastpath`: render N jobs, keep the registrations in `path`;
    `floor`: replay the registrations in `path`."""
    from tools import mocks, render

    config, secrets = render.load_stack_config(STACK)
    if what == "fastpath":
        config["fastpath:jobs"] = json.dumps(generated_jobs(jobs), sort_keys=True)
        start, cpu = time.perf_counter(), time.process_time()
        run = mocks.run(STACK, config, secrets)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        path.write_bytes(pickle.dumps((run.registrations, run.invokes)))
    else:
        registrations, invokes = pickle.loads(path.read_bytes())
        start, cpu = time.perf_counter(), time.process_time()
        run = mocks.run(STACK, config, secrets, program=lambda: replay(registrations, invokes))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        if sorted((r.type, r.name) for r in run.registrations) != sorted((r.type, r.name) for r in registrations):
            raise SystemExit("floor replay registered something else than the run it replays")
    return {"seconds": wall, "cpu": cpu, "resources": len(run.registrations)}


def _measure(what: str, jobs: int, path: Path) -> dict:
    res = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--child", what, str(jobs), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"bench {what} {jobs} jobs failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench_render(sizes: list[int], repeat: int = 3) -> list[dict]:
    """Best of `repeat` for each side, the two sides taking turns: on a shared machine the minimum is the
    figure least disturbed by other work."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"{n}.pickle"
            ours, base = [], []
            for _ in range(repeat):
                ours.append(_measure("fastpath", n, path))
                base.append(_measure("floor", n, path))
            wall, floor_wall = min(r["seconds"] for r in ours), min(r["seconds"] for r in base)
            cpu, floor_cpu = min(r["cpu"] for r in ours), min(r["cpu"] for r in base)
            rows.append(
                {
                    "jobs": n,
                    "seconds": wall,
                    "resources": ours[0]["resources"],
                    "floor_seconds": floor_wall,
                    "ratio": wall / floor_wall,
                    "cpu_ratio": cpu / floor_cpu,
                }
            )
    return rows


def lint_objects(n: int) -> Loaded:
    """A realistic mix: the rendered prod-ib objects (platform and jobs), repeated with new names, as
    `python -m tools.lint` reads them."""
    import copy

    from tools.manifests import Loaded, ManifestError, read
    from tools.render import RENDERED

    path = RENDERED / STACK / "manifests.yaml"
    got = read([path], plain=True)
    if got.unreadable:
        raise ManifestError(got.unreadable)
    out = []
    for i in range(n):
        _, number, obj = got.objects[i % len(got.objects)]
        obj = copy.deepcopy(obj)
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
        out.append((path, number, obj))
    return Loaded(out, [], plain=True)


def bench_lint(n: int, repeat: int = 3) -> dict:
    """The in-process lint of `n` objects as the CLI runs it once they are read (tools.lint.lint_loaded), best of
    `repeat` runs over the same objects. objects/s is reckoned on the process's CPU time, steadier than wall time
    on a shared machine; the wall time of the same best run is given beside it."""
    from tools.lint import lint_loaded

    loaded = lint_objects(n)
    runs = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        violations, problems = lint_loaded(loaded)
        runs.append((time.process_time() - cpu, time.perf_counter() - start))
    if problems:
        raise SystemExit(f"bench lint: objects not judged:\n{problems[0]}")
    cpu, wall = min(runs)
    return {"objects": n, "cpu": cpu, "seconds": wall, "per_second": n / cpu, "violations": len(violations)}


def bench_ncclcheck(size_mb: int) -> dict | None:
    """tools/ncclcheck_bench.py's figures for a generated log of `size_mb`, or None while it does not exist."""
    import importlib

    try:
        module = importlib.import_module("tools.ncclcheck_bench")
    except ModuleNotFoundError as err:
        if err.name != "tools.ncclcheck_bench":
            raise
        return None
    return module.bench(size_mb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="*", default=[100, 1000])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, best kept; default 3")
    ap.add_argument("--lint-objects", type=int, default=10000)
    ap.add_argument("--ncclcheck-mb", type=int, default=NCCLCHECK_MB, help="0 skips the ncclcheck bench")
    ap.add_argument("--child", nargs=3, metavar=("WHAT", "JOBS", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), Path(args.child[2]))))
        return 0
    print(
        f"render {STACK} with generated jobs: full program vs the SDK registering the same objects as plain "
        f"resources (same mocks, fresh interpreter each, best of {args.repeat})"
    )
    print(f"{'jobs':>6} {'seconds':>9} {'resources':>10} {'floor s':>9} {'ratio':>7} {'CPU ratio':>10}")
    for r in bench_render(args.jobs, args.repeat):
        print(
            f"{r['jobs']:>6} {r['seconds']:>9.2f} {r['resources']:>10} {r['floor_seconds']:>9.2f} {r['ratio']:>7.2f} "
            f"{r['cpu_ratio']:>10.2f}"
        )
    if args.lint_objects:
        r = bench_lint(args.lint_objects, args.repeat)
        print(
            f"\nlint {r['objects']} objects (rendered {STACK} objects, renamed; in process, best of {args.repeat}): "
            f"{r['per_second']:,.0f} objects/s ({r['cpu']:.2f} s CPU, {r['seconds']:.2f} s wall), "
            f"{r['violations']} violations"
        )
    if args.ncclcheck_mb:
        result = bench_ncclcheck(args.ncclcheck_mb)
        if result is None:
            print(f"\nncclcheck {args.ncclcheck_mb} MB: skipped, tools/ncclcheck_bench.py is not there yet")
        else:
            print(
                f"\nncclcheck on a generated {result['mb']} MB log of a 1,000-rank job: {result['seconds']:.2f} s, "
                f"{result['mb_per_s']:.0f} MB/s, peak resident {result['max_rss_mb']:.0f} MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
