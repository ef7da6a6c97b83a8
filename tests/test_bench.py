"""The bench's floor (tools/bench.py: replay): the SDK registering exactly what fastpath registered."""

from tools import bench, mocks, render


def test_floor_replays_every_registration_with_its_inputs_parent_and_dependencies():
    config, secrets = render.load_stack_config("prod-roce")
    run = mocks.run("prod-roce", config, secrets)
    floor = mocks.run("prod-roce", config, secrets, program=lambda: bench.replay(run.registrations, run.invokes))

    def shape(r):
        return (r.type, r.name, r.custom, r.parent, tuple(sorted(r.dependencies)), r.protect, r.retain_on_delete, tuple(r.replace_on_changes), r.delete_before_replace, sorted(r.property_dependencies))

    assert sorted(map(shape, floor.registrations)) == sorted(map(shape, run.registrations))
    assert {r.urn: r.inputs for r in floor.registrations} == {r.urn: r.inputs for r in run.registrations}
    assert [token for token, _ in floor.invokes] == [token for token, _ in run.invokes]
