"""The mock runtime (tools/mocks.py): what a program registers, recorded without a stack file or an engine."""

import pytest

from tools import mocks


def test_records_inputs_parents_dependencies_and_outputs_of_each_registration():
    import pulumi

    def program():
        comp = pulumi.ComponentResource("fastpath:test:Box", "box")
        first = pulumi.CustomResource("kubernetes:core/v1:ConfigMap", "first", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "first"}}, pulumi.ResourceOptions(parent=comp))
        pulumi.CustomResource(
            "kubernetes:core/v1:ConfigMap",
            "second",
            {"metadata": first.metadata.apply(lambda m: {"name": "second", "ref": m["uid"]})},
            pulumi.ResourceOptions(parent=comp, depends_on=[first], protect=True),
        )
        comp.register_outputs({"size": 2})

    run = mocks.run("unit", {}, [], program=program)
    by_name = {r.name: r for r in run.registrations}
    box, first, second = by_name["box"], by_name["first"], by_name["second"]
    assert not box.custom and box.outputs == {"size": 2}
    assert first.parent == box.urn and first.inputs["metadata"] == {"name": "first"}  # the stand-in uid left out
    assert second.dependencies == [first.urn] and second.protect
    assert second.property_dependencies == {"metadata": [first.urn]}
    # The stand-in uid is uuid5 of stack/type/name, so the same program always renders the same ownerReferences.
    assert second.inputs["metadata"]["ref"] == "30cc4f0a-c7ab-5531-a08a-4a48eba9ba39"


def test_a_run_error_ends_the_run_with_its_message_alone():
    import pulumi

    def program():
        pulumi.CustomResource("fastpath:test:Thing", "thing", {})
        raise pulumi.RunError("refused")

    with pytest.raises(mocks.ProgramError, match="refused"):
        mocks.run("unit", {}, [], program=program)


def test_records_aliases_and_transforms_without_running_the_transforms():
    import pulumi

    ran: list[str] = []

    def transform(args: pulumi.ResourceTransformArgs) -> None:
        ran.append(args.name)

    def program():
        pulumi.ComponentResource(
            "fastpath:test:Box",
            "box",
            opts=pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="fastpath:test:Old"), pulumi.Alias(name="crate", parent=None)], transforms=[transform]),
        )
        pulumi.ComponentResource("fastpath:test:Box", "plain")

    run = mocks.run("unit", {}, [], program=program)
    by_name = {r.name: r for r in run.registrations}  # a registration with transforms may come later
    box, plain = by_name["box"], by_name["plain"]
    assert box.aliases == [{"type": "fastpath:test:Old"}, {"name": "crate", "noParent": True}]
    assert box.transforms == [transform] and ran == []
    assert plain.aliases == [] and plain.transforms == []
