"""NodeClass drift in the pure core: the instance's AMI, subnet and security groups against
what the NodeClass resolves to now. Unknown data (instance not found, lookup failed) is
never drift."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from joiner.cli.main import main
from joiner.domain.disruption import (
    AMI_ANNOTATION,
    DRIFT,
    SECURITY_GROUPS_ANNOTATION,
    SUBNET_ANNOTATION,
    Decision,
    LaunchInputs,
    NodeFacts,
    ResolvedNodeClass,
    launch_inputs_from_annotations,
    validate,
)
from joiner.domain.model import Node
from tests.disruption.builders import T0, disruption_input, managed_node, pool, run, running_pod, snapshot
from tests.support.fakes import node_class_json

CURRENT = ResolvedNodeClass(
    subnets=frozenset({"subnet-a", "subnet-b"}),
    security_groups=frozenset({"sg-1", "sg-2"}),
    ami_by_arch={"amd64": "ami-new", "arm64": "ami-arm-new"},
)
UP_TO_DATE = LaunchInputs(image_id="ami-new", subnet_id="subnet-a", security_groups=frozenset({"sg-1", "sg-2"}))


def objects(arch: str = "amd64") -> list[dict[str, Any]]:
    """Two full c5.xlarge nodes: whichever drifts needs a replacement for its pod."""
    return [
        pool(types=["c5.xlarge"]),
        managed_node("n1", labels={"kubernetes.io/arch": arch}),
        running_pod("p1", "n1", cpu="3"),
        managed_node("n2"),
        running_pod("p2", "n2", cpu="3"),
    ]


def decide_with(launch: Mapping[str, LaunchInputs | None], resolved: ResolvedNodeClass | None = CURRENT, arch: str = "amd64") -> Decision:
    facts = {name: NodeFacts(launch=value) for name, value in launch.items()}
    node_classes = {"default": resolved} if resolved is not None else {}
    return run(*objects(arch), facts=facts, node_classes=node_classes)


def drifted(decision: Decision) -> tuple[str, ...]:
    return tuple(n for c in decision.commands if c.method == DRIFT for n in c.nodes)


# ---------------------------------------------------------------- AMI


def test_node_whose_ami_changed_is_drifted_and_replaced():
    decision = decide_with({"n1": LaunchInputs(image_id="ami-old", subnet_id="subnet-a", security_groups=frozenset({"sg-1", "sg-2"})), "n2": UP_TO_DATE})
    (command,) = decision.commands
    assert command.method == DRIFT and command.nodes == ("n1",)
    assert "AMI ami-old is not the NodeClass's current amd64 AMI ami-new" in command.reason
    assert command.replacements and command.replacements[0].instance_types[0] == "c5.xlarge"


def test_node_whose_ami_is_current_is_not_drifted():
    assert decide_with({"n1": UP_TO_DATE, "n2": UP_TO_DATE}).commands == ()


def test_ami_is_compared_with_the_nodes_architecture():
    # an arm64 node on the current arm64 AMI is fine, on the amd64 one it is not
    assert drifted(decide_with({"n1": LaunchInputs(image_id="ami-arm-new")}, arch="arm64")) == ()
    assert drifted(decide_with({"n1": LaunchInputs(image_id="ami-new")}, arch="arm64")) == ("n1",)
    # no resolution for the node's architecture: unknown, not drift
    amd64_only = ResolvedNodeClass(ami_by_arch={"amd64": "ami-new"})
    assert drifted(decide_with({"n1": LaunchInputs(image_id="ami-anything")}, amd64_only, arch="arm64")) == ()


def test_gpu_node_is_compared_with_the_nvidia_variant():
    """A node whose labels say NVIDIA GPU runs the AL2023 NVIDIA AMI: that, not the standard
    AMI, is its current one (comparing with the standard AMI drifted every GPU node)."""
    gpu_labels = {"kubernetes.io/arch": "amd64", "joiner.dev/instance-gpu-count": "1", "joiner.dev/instance-gpu-manufacturer": "nvidia"}
    resolved = ResolvedNodeClass(ami_by_arch={"amd64": "ami-new", "amd64/nvidia": "ami-gpu-new"})

    def decide(image: str) -> Decision:
        objects = [pool(types=["c5.xlarge"]), managed_node("n1", labels=gpu_labels), running_pod("p1", "n1", cpu="3")]
        return run(*objects, facts={"n1": NodeFacts(launch=LaunchInputs(image_id=image))}, node_classes={"default": resolved})

    assert drifted(decide("ami-gpu-new")) == ()
    (command,) = decide("ami-gpu-old").commands
    assert command.nodes == ("n1",) and "not the NodeClass's current amd64 nvidia AMI ami-gpu-new" in command.reason
    assert drifted(decide("ami-new")) == ("n1",)  # the standard AMI cannot drive its GPU
    # no NVIDIA resolution (lookup failed): unknown, not drift
    assert (
        drifted(
            run(
                pool(types=["c5.xlarge"]),
                managed_node("n1", labels=gpu_labels),
                running_pod("p1", "n1", cpu="3"),
                facts={"n1": NodeFacts(launch=LaunchInputs(image_id="ami-anything"))},
                node_classes={"default": ResolvedNodeClass(ami_by_arch={"amd64": "ami-new"})},
            )
        )
        == ()
    )


def test_missing_instance_or_unknown_resolution_is_never_drift():
    # instance not found: no launch inputs at all
    assert decide_with({"n1": None, "n2": None}).commands == ()
    assert decide_with({"n1": LaunchInputs(), "n2": LaunchInputs()}).commands == ()
    # the NodeClass could not be resolved (lookup failed)
    stale = LaunchInputs(image_id="ami-old", subnet_id="subnet-gone", security_groups=frozenset({"sg-9"}))
    assert decide_with({"n1": stale}, resolved=None).commands == ()
    assert decide_with({"n1": stale}, resolved=ResolvedNodeClass()).commands == ()


# ---------------------------------------------------------------- subnets and security groups


def test_subnet_not_among_the_resolved_subnets_is_drift():
    (command,) = decide_with({"n1": LaunchInputs(subnet_id="subnet-gone"), "n2": LaunchInputs(subnet_id="subnet-b")}).commands
    assert command.method == DRIFT and command.nodes == ("n1",) and "subnet subnet-gone is no longer selected" in command.reason
    assert decide_with({"n1": LaunchInputs(subnet_id="subnet-a"), "n2": LaunchInputs(subnet_id="subnet-b")}).commands == ()


def test_security_group_set_must_equal_the_resolved_set():
    # a subset is drift too (a group was added to the NodeClass), as is an extra group
    assert drifted(decide_with({"n1": LaunchInputs(security_groups=frozenset({"sg-1"}))})) == ("n1",)
    assert drifted(decide_with({"n1": LaunchInputs(security_groups=frozenset({"sg-1", "sg-2", "sg-3"}))})) == ("n1",)
    (command,) = decide_with({"n1": LaunchInputs(security_groups=frozenset({"sg-1"}))}).commands
    assert "security groups sg-1 differ from the NodeClass's sg-1,sg-2" in command.reason
    assert decide_with({"n1": LaunchInputs(security_groups=frozenset({"sg-2", "sg-1"}))}).commands == ()


def test_nothing_resolved_is_unknown_not_drift():
    empty = ResolvedNodeClass(subnets=frozenset(), security_groups=frozenset())
    assert decide_with({"n1": LaunchInputs(subnet_id="subnet-a", security_groups=frozenset({"sg-1"}))}, empty).commands == ()


def test_validation_drops_the_command_when_the_node_is_current_again():
    stale = {"n1": NodeFacts(launch=LaunchInputs(image_id="ami-old")), "n2": NodeFacts(launch=UP_TO_DATE)}
    snap = snapshot(*objects())
    (command,) = run(*objects(), facts=stale, node_classes={"default": CURRENT}).commands
    still, _ = validate(command, disruption_input(snap, facts=stale, node_classes={"default": CURRENT}))
    assert still is not None and still.nodes == ("n1",)
    rolled_back = ResolvedNodeClass(ami_by_arch={"amd64": "ami-old"})
    gone, why = validate(command, disruption_input(snap, facts=stale, node_classes={"default": rolled_back}))
    assert gone is None and why == "node n1 is no longer drifted"
    unknown, why = validate(command, disruption_input(snap, facts={}, node_classes={"default": CURRENT}))
    assert unknown is None and why == "node n1 is no longer drifted"


def test_annotations_alone_do_not_drift_the_scheduled_pass():
    # the pass reads EC2; annotations are only the offline (snapshot) form
    annotated = [
        pool(types=["c5.xlarge"]),
        managed_node("n1", annotations={AMI_ANNOTATION: "ami-old"}),
        running_pod("p1", "n1", cpu="3"),
        managed_node("n2"),
        running_pod("p2", "n2", cpu="3"),
    ]
    assert run(*annotated, node_classes={"default": CURRENT}).commands == ()


# ---------------------------------------------------------------- offline (joiner disrupt)


def test_launch_inputs_from_annotations():
    node = Node("n", annotations={AMI_ANNOTATION: "ami-1", SUBNET_ANNOTATION: "subnet-1", SECURITY_GROUPS_ANNOTATION: "sg-2, sg-1,"})
    assert launch_inputs_from_annotations(node) == LaunchInputs("ami-1", "subnet-1", frozenset({"sg-1", "sg-2"}))
    assert launch_inputs_from_annotations(Node("bare")) is None
    assert launch_inputs_from_annotations(Node("ami", annotations={AMI_ANNOTATION: "ami-1"})) == LaunchInputs(image_id="ami-1")


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({AMI_ANNOTATION: "ami-old"}, "AMI ami-old is no longer selected"),
        ({SUBNET_ANNOTATION: "subnet-gone"}, "subnet subnet-gone is no longer selected"),
        ({SECURITY_GROUPS_ANNOTATION: "sg-1"}, "security groups sg-1 differ"),
        ({AMI_ANNOTATION: "ami-new", SUBNET_ANNOTATION: "subnet-a", SECURITY_GROUPS_ANNOTATION: "sg-2,sg-1"}, None),
    ],
)
def test_joiner_disrupt_uses_annotations_and_id_selector_terms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], annotations: dict[str, str], expected: str | None
):
    node_class = node_class_json("default")
    node_class["spec"].update(
        {
            "amiSelectorTerms": [{"id": "ami-new"}],
            "subnetSelectorTerms": [{"id": "subnet-a"}, {"id": "subnet-b"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}, {"id": "sg-2"}],
        }
    )
    items = [
        node_class,
        pool(types=["c5.xlarge"]),
        managed_node("n1", annotations=annotations),
        running_pod("p1", "n1", cpu="3"),
        managed_node("n2"),
        running_pod("p2", "n2", cpu="3"),
    ]
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump_all(json.loads(json.dumps(items, default=str))), encoding="utf-8")
    assert main(["disrupt", str(path), "--now", T0.isoformat(), "-o", "json"]) == 0
    commands = json.loads(capsys.readouterr().out)["commands"]
    if expected is None:
        assert commands == []
    else:
        (command,) = commands
        assert command["method"] == DRIFT and command["nodes"] == ["n1"] and expected in command["reason"]
