"""The rule catalogue, one module per area, by what a user looks for: a rule lives with the others about the same
thing (/dev/shm, the fabric, NCCL's environment, gang scheduling, ...), and a new one goes in its area's module,
or a new module named here.

Importing this package registers every rule (policies/__init__.py does, so the catalogue is whole wherever any
part of the pack is read). AREAS is the catalogue's order: the README, the linter and the CrossGuard pack list the
rules area by area, and an area's rules in the order its module defines them. tests/test_policies.py fails on a
module of this folder that AREAS does not name.
"""

from importlib import import_module

AREAS = (
    "shm",
    "fabric",
    "dra",
    "nccl",
    "gang",
    "kueue",
    "lifecycle",
    "checkpoints",
    "gpus",
    "images",
    "credentials",
    "networks",
    "trainer_v2",
    "judgeable",
)

for _area in AREAS:
    import_module(f"{__name__}.{_area}")
