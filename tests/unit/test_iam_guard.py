"""The IAM guard's evaluator and request models: cases a wrong evaluator would decide wrongly."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.iam_guard import (
    Guard,
    authorizations,
    bind,
    build_arn,
    load_deployment,
)
from tests.support.iam_policy import Authorization, UnsupportedPolicy, evaluate

REGION = "eu-west-1"
INSTANCE = "arn:aws:ec2:eu-west-1:123456789012:instance/i-0abc"
TAGS_ABSENT = ("aws:RequestTag/*", "aws:ResourceTag/*", "aws:TagKeys")


def allow(action: Any, resource: Any = "*", condition: dict[str, Any] | None = None, sid: str = "S") -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": action, "Resource": resource}
    if condition:
        statement["Condition"] = condition
    return statement


def request(action: str = "ec2:TerminateInstances", resource: str = INSTANCE, **context: Any) -> Authorization:
    return Authorization(action, resource, context, TAGS_ABSENT)


def allowed(statements: list[dict[str, Any]], authorization: Authorization) -> bool:
    return evaluate(statements, authorization).allowed


# ---------------------------------------------------------------- actions and resources


def test_nothing_is_allowed_without_a_matching_allow() -> None:
    assert not allowed([], request())
    assert not allowed([allow("ec2:DescribeInstances")], request())


def test_actions_match_case_insensitively_with_wildcards_but_not_by_prefix() -> None:
    assert allowed([allow("EC2:terminateinstances")], request())
    assert allowed([allow("ec2:Terminate*")], request())
    assert not allowed([allow("ec2:Terminate")], request())  # no implicit prefix match
    assert not allowed([allow("ec2:Describe*")], request("ec2:DescribeInstanceAttribute").__class__("ec2:GetConsoleOutput", INSTANCE, {}, TAGS_ABSENT))


def test_resources_match_case_sensitively_and_wildcards_span_segments() -> None:
    assert allowed([allow("ec2:TerminateInstances", "arn:aws:ec2:eu-west-1:*:instance/*")], request())
    assert not allowed([allow("ec2:TerminateInstances", "arn:aws:ec2:eu-west-1:*:Instance/*")], request())
    assert not allowed([allow("ec2:TerminateInstances", "arn:aws:ec2:us-east-1:*:instance/*")], request())
    assert not allowed([allow("ec2:TerminateInstances", "arn:aws:ec2:eu-west-1:*:volume/*")], request())


def test_an_explicit_deny_wins_over_any_allow() -> None:
    statements = [allow("ec2:*"), {"Sid": "No", "Effect": "Deny", "Action": "ec2:TerminateInstances", "Resource": "*"}]
    decision = evaluate(statements, request())
    assert not decision.allowed and decision.explicitly_denied and decision.matched == ("No",)


def test_not_action_and_not_resource_exclude() -> None:
    assert not allowed([{"Effect": "Allow", "NotAction": "ec2:TerminateInstances", "Resource": "*"}], request())
    assert allowed([{"Effect": "Allow", "NotAction": "ec2:RunInstances", "Resource": "*"}], request())
    assert not allowed([{"Effect": "Allow", "Action": "*", "NotResource": "arn:aws:ec2:*:*:instance/*"}], request())


# ---------------------------------------------------------------- conditions


def test_string_equals_needs_the_key_and_an_exact_case_sensitive_value() -> None:
    fenced = [allow("ec2:TerminateInstances", condition={"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": "prod"}})]
    assert allowed(fenced, request(**{"aws:ResourceTag/joiner.dev/cluster": "prod"}))
    assert allowed(fenced, request(**{"AWS:resourcetag/joiner.dev/cluster": "prod"}))  # key names are case-insensitive
    assert not allowed(fenced, request(**{"aws:ResourceTag/joiner.dev/cluster": "Prod"}))  # values are not
    assert not allowed(fenced, request(**{"aws:ResourceTag/joiner.dev/cluster": "prod-2"}))
    assert not allowed(fenced, request())  # untagged: the key is absent, so the condition fails


def test_values_of_a_key_or_together_keys_and_operators_and_together() -> None:
    statement = allow(
        "ec2:CreateTags",
        condition={
            "StringEquals": {"aws:RequestTag/joiner.dev/cluster": "prod", "ec2:CreateAction": ["RunInstances", "CreateFleet"]},
            "StringLike": {"aws:RequestTag/joiner.dev/nodepool": "*"},
        },
    )
    ok = {"aws:RequestTag/joiner.dev/cluster": "prod", "ec2:CreateAction": "CreateFleet", "aws:RequestTag/joiner.dev/nodepool": "a"}
    assert allowed([statement], request("ec2:CreateTags", **ok))
    assert not allowed([statement], request("ec2:CreateTags", **{**ok, "ec2:CreateAction": "CreateVolume"}))
    without_pool = {k: v for k, v in ok.items() if "nodepool" not in k}
    assert not allowed([statement], request("ec2:CreateTags", **without_pool))


def test_for_all_values_is_true_for_an_absent_key_and_checks_every_value() -> None:
    statement = allow("ec2:CreateTags", condition={"ForAllValues:StringLike": {"aws:TagKeys": ["joiner.dev/*", "Name"]}})
    assert allowed([statement], request("ec2:CreateTags", INSTANCE, **{"aws:TagKeys": ["joiner.dev/a", "Name"]}))
    assert not allowed([statement], request("ec2:CreateTags", INSTANCE, **{"aws:TagKeys": ["joiner.dev/a", "kubernetes.io/cluster/x"]}))
    assert allowed([statement], request("ec2:CreateTags"))  # no tag keys at all: vacuously true, as in IAM
    any_value = allow("ec2:CreateTags", condition={"ForAnyValue:StringEquals": {"aws:TagKeys": ["Name"]}})
    assert not allowed([any_value], request("ec2:CreateTags"))


def test_arn_like_compares_each_arn_part() -> None:
    statement = allow("sns:Publish", condition={"ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:eu-west-1:111122223333:alarm:*"}})
    own = "arn:aws:cloudwatch:eu-west-1:111122223333:alarm:Joiner-Errors"
    assert allowed([statement], request("sns:Publish", "*", **{"aws:SourceArn": own}))
    assert not allowed([statement], request("sns:Publish", "*", **{"aws:SourceArn": own.replace("111122223333", "999999999999")}))


def test_negated_operators_hold_for_an_absent_key() -> None:
    statement = allow("ec2:TerminateInstances", condition={"StringNotEquals": {"aws:ResourceTag/team": "b"}})
    assert allowed([statement], request())
    assert not allowed([statement], request(**{"aws:ResourceTag/team": "b"}))


def test_unknown_constructs_fail_loudly() -> None:
    with pytest.raises(UnsupportedPolicy, match="operator"):
        evaluate([allow("ec2:TerminateInstances", condition={"NumericLessThan": {"ec2:VolumeSize": "10"}})], request())
    with pytest.raises(UnsupportedPolicy, match="does not supply"):
        evaluate([allow("ec2:TerminateInstances", condition={"StringEquals": {"ec2:InstanceType": "m5.large"}})], request())
    with pytest.raises(UnsupportedPolicy, match="variables"):
        evaluate([allow("ec2:TerminateInstances", "arn:aws:ec2:*:*:instance/${aws:username}")], request())
    with pytest.raises(UnsupportedPolicy, match="Principal"):
        evaluate([{**allow("ec2:TerminateInstances"), "Principal": "*"}], request())


# ---------------------------------------------------------------- request models


class FakeState:
    def __init__(self, tags: dict[str, dict[str, str]], templates: dict[str, dict[str, Any]]) -> None:
        self._tags, self._templates = tags, templates

    def tags(self, resource_id: str) -> dict[str, str] | None:
        return self._tags.get(resource_id)

    def launch_template(self, template_id: str | None, name: str | None, version: str | None) -> tuple[str, dict[str, Any]] | None:
        return (template_id, self._templates[template_id]) if template_id in self._templates else None

    def image_snapshots(self, image_id: str) -> list[str]:
        return ["snap-1"]


TEMPLATE_DATA = {
    "ImageId": "ami-1",
    "SecurityGroupIds": ["sg-1"],
    "IamInstanceProfile": {"Name": "JoinerNodeRole-prod"},
    "TagSpecifications": [{"ResourceType": t, "Tags": [{"Key": "joiner.dev/cluster", "Value": "prod"}]} for t in ("instance", "volume")],
}


def fleet_params(capacity_type: str = "on-demand") -> dict[str, Any]:
    return {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-1", "Version": "1"}, "Overrides": [{"InstanceType": "m5.large", "SubnetId": "subnet-1"}]}
        ],
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
        "TagSpecifications": [{"ResourceType": t, "Tags": [{"Key": "joiner.dev/cluster", "Value": "prod"}]} for t in ("instance", "fleet")],
    }


def test_create_fleet_authorizes_every_resource_it_creates_and_uses_with_their_tags() -> None:
    state = FakeState({"lt-1": {"joiner.dev/cluster": "prod"}}, {"lt-1": TEMPLATE_DATA})
    needed = authorizations("ec2", "CreateFleet", fleet_params("spot"), region=REGION, state=state)  # type: ignore[arg-type]
    by_type = {(a.action, a.resource.split(":")[5].split("/")[0]) for a in needed}
    # What each launch action authorizes comes from the IAM database, not from a table here.
    for resource_type in ("fleet", "instance", "volume", "launch-template", "image", "subnet"):
        assert ("ec2:CreateFleet", resource_type) in by_type
    for resource_type in ("instance", "volume", "network-interface", "launch-template", "image", "snapshot", "subnet", "security-group"):
        assert ("ec2:RunInstances", resource_type) in by_type
    assert ("ec2:CreateFleet", "network-interface") not in by_type and ("ec2:CreateFleet", "snapshot") not in by_type
    (eni,) = [a for a in needed if a.action == "ec2:RunInstances" and ":network-interface/" in a.resource]
    assert eni.context["aws:TagKeys"] == []  # the template above does not tag network interfaces
    (template,) = [a for a in needed if a.action == "ec2:CreateFleet" and ":launch-template/" in a.resource]
    assert template.context["aws:ResourceTag/joiner.dev/cluster"] == "prod"
    (image,) = [a for a in needed if a.action == "ec2:RunInstances" and ":image/" in a.resource]
    assert image.resource == "arn:aws:ec2:eu-west-1::image/ami-1"  # AMIs are owned by no account in the ARN
    (pass_role,) = [a for a in needed if a.action == "iam:PassRole"]
    assert pass_role.resource == "arn:aws:iam::123456789012:role/JoinerNodeRole-prod"
    on_demand = authorizations("ec2", "CreateFleet", fleet_params(), region=REGION, state=state)  # type: ignore[arg-type]
    assert len(on_demand) == len(needed)  # no action of a fleet launch authorizes spot requests (IAM database)


def test_terminate_reads_resource_tags_and_skips_unknown_instances() -> None:
    state = FakeState({"i-1": {"joiner.dev/cluster": "prod"}}, {})
    (terminate,) = authorizations("ec2", "TerminateInstances", {"InstanceIds": ["i-1", "i-gone"]}, region=REGION, state=state)  # type: ignore[arg-type]
    assert terminate.resource == build_arn("ec2", "instance", REGION, "123456789012", "i-1")
    assert terminate.context["aws:ResourceTag/joiner.dev/cluster"] == "prod"


def test_unmodelled_operations_fail_loudly() -> None:
    with pytest.raises(UnsupportedPolicy, match="no model"):
        authorizations("ec2", "ModifyInstanceAttribute", {}, region=REGION, state=FakeState({}, {}))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedPolicy, match="no model"):
        authorizations("iam", "CreateRole", {}, region=REGION)


# ---------------------------------------------------------------- against the synthesized stack


def settings(cluster: str = "prod", **overrides: str) -> Any:
    values = {
        "cluster_name": cluster,
        "region": REGION,
        "state_table": "prod-state",
        "idempotency_table": "prod-idem",
        "work_queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/prod-work",
        "interruption_queue_url": "",
        "node_role": "JoinerNodeRole-prod",
    }
    return SimpleNamespace(**{**values, **overrides})


@pytest.fixture(scope="module")
def deployment() -> Any:
    return load_deployment("prod")


def decide(deployment: Any, function: str, authorization: Authorization) -> bool:
    binding = bind(deployment, function, settings())
    return evaluate([binding.resolve(s) for s in deployment.statements[function]], authorization).allowed


def test_the_stack_fences_termination_by_this_clusters_tag(deployment: Any) -> None:
    arn = build_arn("ec2", "instance", REGION, "123456789012", "i-1")
    ours = Authorization("ec2:TerminateInstances", arn, {"aws:ResourceTag/joiner.dev/cluster": "prod"}, TAGS_ABSENT)
    theirs = Authorization("ec2:TerminateInstances", arn, {"aws:ResourceTag/joiner.dev/cluster": "other"}, TAGS_ABSENT)
    assert decide(deployment, "scanner", ours) and decide(deployment, "gc", ours)
    assert not decide(deployment, "scanner", theirs)


def test_the_stack_grants_data_to_its_users_only(deployment: Any) -> None:
    def send(function: str) -> bool:
        needed = authorizations("sqs", "SendMessage", {"QueueUrl": settings().work_queue_url}, region=REGION)
        return all(decide(deployment, function, a) for a in needed)

    assert send("termination") and not send("scanner") and not send("gc")
    idempotency = Authorization("dynamodb:PutItem", build_arn("dynamodb", "table", REGION, "123456789012", "prod-idem"))
    assert decide(deployment, "interruption", idempotency) and not decide(deployment, "termination", idempotency)
    user_data = Authorization("ec2:DescribeInstanceAttribute", "*", {"aws:RequestedRegion": REGION})
    assert not decide(deployment, "scanner", user_data)


def test_the_guard_records_a_denied_launch(deployment: Any) -> None:
    guard = Guard(lambda cluster: deployment)
    state = FakeState({"lt-1": {"joiner.dev/cluster": "prod"}}, {"lt-1": TEMPLATE_DATA})
    import tests.support.iam_guard as module

    original = module.MotoState
    module.MotoState = lambda region, account="": state  # type: ignore[assignment,misc,return-value]
    try:
        guard.check("scanner", settings(), "ec2", "CreateFleet", fleet_params(), REGION)
    finally:
        module.MotoState = original  # type: ignore[misc]
    # The template above leaves network interfaces untagged: the cluster's request-tag fence denies them.
    assert any("network-interface" in f.message and "not allowed" in f.message for f in guard.findings)
    assert not guard.exercised.get("gc")


@pytest.mark.parametrize(("service", "allowed_"), [("ec2.amazonaws.com", True), ("ec2.amazonaws.com.cn", True), ("lambda.amazonaws.com", False)])
def test_the_node_role_may_be_passed_to_ec2_in_every_partition_only(deployment: Any, service: str, allowed_: bool) -> None:
    """The launch path passes the node role (named by the function's JOINER_NODE_ROLE) to EC2,
    whose service principal is ec2.amazonaws.com.cn in the China regions."""
    role = build_arn("iam", "role", REGION, "123456789012", "JoinerNodeRole-prod")
    pass_role = Authorization("iam:PassRole", role, {"iam:PassedToService": service}, TAGS_ABSENT)
    assert decide(deployment, "scanner", pass_role) is allowed_
    other = Authorization("iam:PassRole", build_arn("iam", "role", REGION, "123456789012", "Admin"), {"iam:PassedToService": service}, TAGS_ABSENT)
    assert not decide(deployment, "scanner", other)
