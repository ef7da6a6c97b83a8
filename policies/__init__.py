"""fastpath's policy rules: pure functions over Kubernetes objects, run by the CrossGuard pack (__main__.py)
and by the offline linter (tools/lint.py).

    engine.py   Rule, Finding, Context, the @rule catalogue, normalizing input, running rules (evaluate)
    config.py   the policy-pack config (CrossGuard's format), checked and resolved
    rules/      the rules, one module per area; importing the package registers them all (below)
    pods.py     what the rules read of a pod; shell.py splits commands as the shell would
    dra.py      what a pod's DRA claims hold (GPUs, RDMA NICs, an IMEX channel), read off the claims and classes
    podspecs.py the pod templates of every workload kind; runtimes.py a TrainJob's pods from its runtime
    pack.py     the CrossGuard policies built from the catalogue

Importing any part of the pack imports policies.rules first, so RULES holds every rule wherever it is read.
"""

from policies import rules  # noqa: F401
