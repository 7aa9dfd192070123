"""What AWS services need from the stack's resource and key policies (tests/support/resource_policies.py):
the synthesized stacks pass, and the checker catches the mistakes moto would let through."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.infra.conftest import Synthesized
from tests.support.resource_policies import problems


@pytest.mark.parametrize("variant", ["synthesized", "synthesized_private"])
def test_every_service_principal_is_let_in(request: pytest.FixtureRequest, variant: str) -> None:
    synthesized: Synthesized = request.getfixturevalue(variant)
    assert problems(synthesized.template) == []


def _events_statement(condition: dict[str, Any] | None) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": ["kms:GenerateDataKey", "kms:Decrypt"],
        "Resource": "*",
    }
    if condition:
        statement["Condition"] = condition
    return statement


def _rule_to_queue(*, key_statement: dict[str, Any] | None, source_arn: bool = True) -> dict[str, Any]:
    """One rule -> one queue (its own DLQ), optionally KMS-encrypted by a key in the template."""
    queue: dict[str, Any] = {"Type": "AWS::SQS::Queue", "Properties": {}}
    resources: dict[str, Any] = {
        "Rule": {"Type": "AWS::Events::Rule", "Properties": {"Targets": [{"Arn": {"Fn::GetAtt": ["Queue", "Arn"]}, "Id": "T"}]}},
        "Queue": queue,
        "QueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": "Queue"}],
                "PolicyDocument": {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "events.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": ["Queue", "Arn"]},
                            **({"Condition": {"ArnEquals": {"aws:SourceArn": [{"Fn::GetAtt": ["Rule", "Arn"]}]}}} if source_arn else {}),
                        }
                    ]
                },
            },
        },
    }
    if key_statement is not None:
        queue["Properties"]["KmsMasterKeyId"] = {"Fn::GetAtt": ["Key", "Arn"]}
        resources["Key"] = {"Type": "AWS::KMS::Key", "Properties": {"KeyPolicy": {"Statement": [key_statement]}}}
    return {"Resources": resources}


def test_a_key_grant_to_eventbridge_under_an_undocumented_condition_key_is_caught() -> None:
    """The stack's old key policy: EventBridge's grant fenced by aws:SourceAccount."""
    fenced = _rule_to_queue(key_statement=_events_statement({"StringEquals": {"aws:SourceAccount": "123456789012"}}))
    (found, *more) = problems(fenced)
    assert "aws:sourceaccount" in found and "events.amazonaws.com" in found and len(more) == 1  # both actions
    assert problems(_rule_to_queue(key_statement=_events_statement(None))) == []
    assert problems(_rule_to_queue(key_statement=None)) == []  # SSE-SQS


def test_a_queue_policy_without_the_rules_source_arn_is_caught() -> None:
    (found,) = problems(_rule_to_queue(key_statement=None, source_arn=False))
    assert "aws:SourceArn" in found


def test_a_short_visibility_on_an_event_source_mapped_queue_is_caught(synthesized: Synthesized) -> None:
    template = copy.deepcopy(synthesized.template)
    queue = next(key for key, r in template["Resources"].items() if r["Type"] == "AWS::SQS::Queue" and "IngestionInterruptionQueue" in key)
    template["Resources"][queue]["Properties"]["VisibilityTimeout"] = 30  # the function's timeout: a message still in work comes back
    (found,) = problems(template)
    assert "does not outlast" in found and queue in found


def test_a_key_without_the_alarm_grant_is_caught(synthesized: Synthesized) -> None:
    template = copy.deepcopy(synthesized.template)
    (key,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::KMS::Key"]
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    statements[:] = [s for s in statements if s.get("Principal") != {"Service": "cloudwatch.amazonaws.com"}]
    found = problems(template)
    assert found and all("cloudwatch.amazonaws.com" in line for line in found)
