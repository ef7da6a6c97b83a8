"""Benchmarks (make bench): how rendering scales with the number of jobs, against the Pulumi SDK's own floor,
and how fast the linter checks objects.

For N generated jobs on the prod-ib stack: wall seconds of the full program under mocks, resources registered,
and the ratio to the floor: the same number of bare resources registered under the same mocks in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time

STACK = "prod-ib"
FRAMEWORKS = ("pytorch", "mpi", "tensorflow")


def generated_jobs(n: int) -> list[dict]:
    jobs = []
    for i in range(n):
        fw = FRAMEWORKS[i % 3]
        job = {"name": f"job-{i:04d}", "framework": fw, "image": "nvcr.io/nvidia/pytorch:25.10-py3",
               "command": ["python", "train.py", "--seed", str(i)], "queue": "research"}
        if fw == "pytorch" and i % 2:
            job["elastic"] = {"minNodes": 2, "maxNodes": 4 + i % 8}
        else:
            job["nodes"] = 1 + i % 16
        jobs.append(job)
    return jobs


def floor(count: int) -> float:
    import pulumi

    from tools import render

    def program() -> None:
        for i in range(count):
            pulumi.CustomResource("fastpath:bench:Bare", f"bare-{i}", {"i": i})

    start = time.perf_counter()
    render.run_program(STACK, program=program)
    return time.perf_counter() - start


def bench_render(sizes: list[int]) -> list[dict]:
    from tools import render

    rows = []
    for n in sizes:
        start = time.perf_counter()
        run = render.run_program(STACK, extra_config={"fastpath:jobs": generated_jobs(n)})
        wall = time.perf_counter() - start
        count = len(run.registrations)
        base = floor(count)
        rows.append({"jobs": n, "seconds": wall, "resources": count, "floor_seconds": base, "ratio": wall / base})
    return rows


def lint_objects(n: int) -> list[dict]:
    """A realistic mix: the rendered prod-ib objects (platform and jobs), repeated with new names."""
    import copy

    from tools.manifests import load
    from tools.render import RENDERED

    base = [o for _, o in load([RENDERED / STACK / "manifests.yaml"])]
    out = []
    for i in range(n):
        obj = copy.deepcopy(base[i % len(base)])
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i}"
        out.append(obj)
    return out


def bench_lint(n: int) -> dict:
    from tools.lint import lint

    objects = lint_objects(n)
    start = time.perf_counter()
    violations = lint(objects)
    wall = time.perf_counter() - start
    return {"objects": n, "seconds": wall, "per_second": n / wall, "violations": len(violations)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="*", default=[100, 1000])
    ap.add_argument("--lint-objects", type=int, default=10000)
    args = ap.parse_args(argv)
    print(f"render {STACK} with generated jobs (full program under mocks vs bare resources, same mocks)")
    print(f"{'jobs':>6} {'seconds':>9} {'resources':>10} {'floor s':>9} {'ratio':>7}")
    for r in bench_render(args.jobs):
        print(f"{r['jobs']:>6} {r['seconds']:>9.2f} {r['resources']:>10} {r['floor_seconds']:>9.2f} {r['ratio']:>7.2f}")
    r = bench_lint(args.lint_objects)
    print(f"\nlint {r['objects']} objects (rendered {STACK} objects, renamed): {r['seconds']:.2f} s, "
          f"{r['per_second']:.0f} objects/s, {r['violations']} violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
