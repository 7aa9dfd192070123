"""cfn-lint and cdk-nag (AwsSolutions) on the synthesized templates, and the justification
logic that acknowledges nag findings."""

from __future__ import annotations

import pytest

from infra.nag import flatten_reference, wildcard_findings
from tests.infra.conftest import Synthesized

#: CDK makes a function depend on its execution role although the function's Role property
#: already references it (W3005: redundant DependsOn). Harmless, and not ours to change.
IGNORED_CFN_LINT_CHECKS = ["W3005"]


@pytest.mark.parametrize("variant", ["synthesized", "synthesized_private"])
def test_cfn_lint_is_clean(request, variant):
    from cfnlint.api import ManualArgs, lint_file

    synthesized: Synthesized = request.getfixturevalue(variant)
    matches = lint_file(synthesized.template_path, config=ManualArgs(regions=["us-east-1", "eu-west-1"], ignore_checks=IGNORED_CFN_LINT_CHECKS))
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


def acknowledgements(synthesized: Synthesized) -> dict[str, dict[str, str]]:
    """logical id -> {rule id: reason} from the cdk_nag template metadata."""
    result = {}
    for logical_id, resource in synthesized.template["Resources"].items():
        rules = resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
        if rules:
            result[logical_id] = {rule["id"]: rule["reason"] for rule in rules}
    return result


@pytest.mark.parametrize("variant", ["synthesized", "synthesized_private"])
def test_cdk_nag_passes_with_every_acknowledgement_justified(request, variant):
    """Synth ran the AwsSolutions pack (it raises on any unacknowledged finding). What it
    acknowledged is narrow: IAM4/IAM5 findings by full id, the runtime pin and the image
    bucket's access logs, each with a reason."""
    synthesized: Synthesized = request.getfixturevalue(variant)
    assert synthesized.nag_violations == []  # no error and no warning left unacknowledged
    acknowledged = acknowledgements(synthesized)
    assert acknowledged
    for logical_id, rules in acknowledged.items():
        for rule_id, reason in rules.items():
            assert rule_id.startswith(("AwsSolutions-IAM4[", "AwsSolutions-IAM5[", "AwsSolutions-L1")) or (
                rule_id == "AwsSolutions-S1" and logical_id.startswith("JoinerClusterImageBucket")
            ), (logical_id, rule_id)
            assert len(reason) > 30, (logical_id, rule_id, reason)
    launch = next(rules for logical_id, rules in acknowledged.items() if "AccessLaunch" in logical_id)
    assert any(rule.endswith(":instance/*]") for rule in launch)
    # Launch grants Resource "*" only for the Describe actions it calls (no write is resource-less)
    assert "Describe actions" in launch["AwsSolutions-IAM5[Resource::*]"]
    functions = [rules for logical_id, rules in acknowledged.items() if logical_id.startswith("JoinerFunctions") and "Logs" not in logical_id]
    assert sum("AwsSolutions-L1" in rules for rules in functions) == (6 if variant == "synthesized" else 5)  # the watcher: responsive only


def test_nag_fails_synth_on_an_unjustified_wildcard(tmp_path):
    from aws_cdk import App, AspectPriority, Aspects, Stack
    from aws_cdk import aws_iam as iam

    from infra.nag import JustifiedFindings, add_nag_checks

    app = App(outdir=str(tmp_path))
    stack = Stack(app, "Probe")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    # Justified: an EC2 write fenced by the cluster tag.
    role.add_to_policy(
        iam.PolicyStatement(
            actions=["ec2:TerminateInstances"],
            resources=[stack.format_arn(service="ec2", account="*", resource="instance", resource_name="*")],
            conditions={"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": "demo"}},
        )
    )
    # Not justified: the same resource without the tag condition, and an S3 wildcard.
    role.add_to_policy(iam.PolicyStatement(actions=["s3:*"], resources=["*"]))
    Aspects.of(stack).add(JustifiedFindings(), priority=AspectPriority.MUTATING)
    add_nag_checks(app)
    with pytest.raises(Exception) as failure:
        app.synth()
    assert "ValidationFailed" in str(failure.value)
    report = (tmp_path / "validation-report.json").read_text()
    assert "AwsSolutions-IAM5[Action::s3:*]" in report
    assert "AwsSolutions-IAM5[Resource::*]" in report
    assert "instance/*" not in report  # the tag-fenced statement was acknowledged


def test_a_wildcard_is_acknowledged_only_if_every_statement_producing_it_is_justified(monkeypatch):
    import infra.nag as nag

    justified = {
        "Effect": "Allow",
        "Action": "ec2:TerminateInstances",
        "Resource": "arn:aws:ec2:us-east-1:*:instance/*",
        "Condition": {"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": "demo"}},
    }
    unfenced = {"Effect": "Allow", "Action": "ec2:StopInstances", "Resource": "arn:aws:ec2:us-east-1:*:instance/*"}
    findings = wildcard_findings({"Statement": [justified, unfenced]})
    assert list(findings) == ["Resource::arn:aws:ec2:us-east-1:*:instance/*"]
    acknowledged: list[str] = []
    monkeypatch.setattr(nag, "acknowledge", lambda node, rule_id, reason: acknowledged.append(rule_id))
    nag.JustifiedFindings._acknowledge_wildcards(None, {"Statement": [justified, unfenced]})
    assert acknowledged == []
    nag.JustifiedFindings._acknowledge_wildcards(None, {"Statement": [justified]})
    assert acknowledged == ["AwsSolutions-IAM5[Resource::arn:aws:ec2:us-east-1:*:instance/*]"]


def test_findings_mirror_cdk_nag_flattening():
    document = {
        "Statement": [
            {"Effect": "Allow", "Action": ["kms:GenerateDataKey*", "kms:Decrypt"], "Resource": {"Fn::GetAtt": ["Key1", "Arn"]}},
            {"Effect": "Allow", "Action": "dynamodb:Query", "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": ["Table1", "Arn"]}, "/index/*"]]}},
            {
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": {
                    "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ssm:", {"Ref": "AWS::Region"}, "::parameter/aws/service/eks/optimized-ami/*"]]
                },
            },
            {"Effect": "Deny", "Action": "*", "Resource": "*"},
        ]
    }
    assert sorted(wildcard_findings(document)) == [
        "Action::kms:GenerateDataKey*",
        "Resource::<Table1.Arn>/index/*",
        "Resource::arn:<AWS::Partition>:ssm:<AWS::Region>::parameter/aws/service/eks/optimized-ami/*",
    ]
    assert flatten_reference({"Fn::Sub": "arn:${AWS::Partition}:s3:::b/*"}) == "arn:<AWS::Partition>:s3:::b/*"
    assert flatten_reference({"Ref": "Thing"}) == "<Thing>"
