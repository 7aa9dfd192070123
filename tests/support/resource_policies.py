"""Service principals' access in a synthesized template: what AWS services must be allowed by
resource and key policies for the stack's wiring to work, checked before deployment (moto
enforces none of it).

- EventBridge rule -> SQS queue (each target and each target's DLQ): the queue policy allows
  ``sqs:SendMessage`` to ``events.amazonaws.com`` with ``aws:SourceArn`` naming that rule; the
  queue is unencrypted or SSE-SQS, or its KMS key policy allows ``events.amazonaws.com``
  ``kms:GenerateDataKey`` and ``kms:Decrypt`` with no condition (AWS documents no condition
  key as supported for EventBridge's deliveries to encrypted queues or topics).
- EventBridge rule -> Lambda function: a ``AWS::Lambda::Permission`` for ``events.amazonaws.com``
  with that rule's ARN as ``SourceArn``.
- CloudWatch alarm -> SNS topic (created in the stack): the topic policy allows ``sns:Publish``
  to ``cloudwatch.amazonaws.com``; an encrypted topic's key policy allows that principal
  ``kms:Decrypt`` and ``kms:GenerateDataKey*`` (conditions only on ``aws:SourceAccount`` and
  ``aws:SourceArn``, as documented for alarm actions).
- Lambda event source mapping <- SQS queue: the function's role may receive, delete and read
  the queue's attributes, and decrypt with the queue's key; the queue's visibility timeout is
  longer than the function's timeout plus the batching window (AWS suggests six timeouts;
  Joiner declines it for prompt redelivery: docs/infra.md).

:func:`problems` returns one line per broken rule (empty: nothing found).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["DOCUMENTED_CONDITION_KEYS", "problems"]

#: Condition keys AWS documents as honoured in key-policy grants to each service principal
#: (none for EventBridge: a condition it does not send makes the grant match nothing).
DOCUMENTED_CONDITION_KEYS: Mapping[str, frozenset[str]] = {
    "events.amazonaws.com": frozenset(),
    "cloudwatch.amazonaws.com": frozenset({"aws:sourceaccount", "aws:sourcearn"}),
}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _service_principals(statement: Mapping[str, Any]) -> list[str]:
    principal = statement.get("Principal")
    if not isinstance(principal, dict):
        return []
    return [str(p) for p in _list(principal.get("Service", []))]


def _allows(statement: Mapping[str, Any], principal: str, action: str) -> bool:
    return (
        statement.get("Effect") == "Allow"
        and principal in _service_principals(statement)
        and any(fnmatch.fnmatchcase(action.lower(), str(a).lower()) for a in _list(statement.get("Action", [])))
    )


def _condition_keys(statement: Mapping[str, Any]) -> set[str]:
    return {key.lower() for block in (statement.get("Condition") or {}).values() for key in block}


def _logical(reference: Any, attribute: str | None = None) -> str | None:
    """The logical id a ``Ref`` (or ``Fn::GetAtt`` of ``attribute``) names."""
    if isinstance(reference, dict) and attribute is None and "Ref" in reference:
        return str(reference["Ref"])
    if isinstance(reference, dict) and "Fn::GetAtt" in reference:
        logical, got = reference["Fn::GetAtt"]
        if attribute is None or got == attribute:
            return str(logical)
    return None


class _Template:
    def __init__(self, template: Mapping[str, Any]) -> None:
        self.resources: Mapping[str, Mapping[str, Any]] = template["Resources"]

    def of_type(self, resource_type: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for logical, resource in self.resources.items():
            if resource["Type"] == resource_type:
                yield logical, resource.get("Properties", {})

    def queue_policy_statements(self, queue: str) -> list[Mapping[str, Any]]:
        return [s for _, p in self.of_type("AWS::SQS::QueuePolicy") if {"Ref": queue} in p.get("Queues", []) for s in _list(p["PolicyDocument"]["Statement"])]

    def topic_policy_statements(self, topic: str) -> list[Mapping[str, Any]]:
        return [s for _, p in self.of_type("AWS::SNS::TopicPolicy") if {"Ref": topic} in p.get("Topics", []) for s in _list(p["PolicyDocument"]["Statement"])]

    def key_policy_statements(self, key_reference: Any) -> list[Mapping[str, Any]] | None:
        """The key policy of a key in the template; None for a key outside it (an ARN or alias)."""
        logical = _logical(key_reference, "Arn") or _logical(key_reference)
        if logical is None or self.resources.get(logical, {}).get("Type") != "AWS::KMS::Key":
            return None
        return _list(self.resources[logical]["Properties"]["KeyPolicy"]["Statement"])

    def role_statements(self, role: str) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        for _, policy in self.of_type("AWS::IAM::Policy"):
            if {"Ref": role} in policy.get("Roles", []):
                out.extend(_list(policy["PolicyDocument"]["Statement"]))
        return out


def _key_grants(statements: list[Mapping[str, Any]], principal: str, actions: tuple[str, ...]) -> list[str]:
    """What is missing for ``principal`` to use a key for ``actions`` (empty: granted)."""
    missing = []
    allowed_keys = DOCUMENTED_CONDITION_KEYS.get(principal, frozenset())
    for action in actions:
        usable = [s for s in statements if _allows(s, principal, action) and _condition_keys(s) <= allowed_keys]
        if not usable:
            fenced = [s for s in statements if _allows(s, principal, action)]
            if fenced:
                keys = sorted(set().union(*(_condition_keys(s) for s in fenced)) - allowed_keys)
                missing.append(f"{action} only under condition keys {keys} AWS does not document for {principal}")
            else:
                missing.append(f"{action} not granted to {principal}")
    return missing


def _queue_encryption_problems(t: _Template, queue: str, principal: str, actions: tuple[str, ...], why: str) -> list[str]:
    properties = t.resources[queue].get("Properties", {})
    key = properties.get("KmsMasterKeyId")
    if key is None:
        return []  # SSE-SQS (SqsManagedSseEnabled, the default) or unencrypted
    statements = t.key_policy_statements(key)
    if statements is None:
        return [f"{why}: queue {queue} uses a key outside the stack ({json.dumps(key)}); its policy cannot be checked"]
    return [f"{why}: key of queue {queue}: {m}" for m in _key_grants(statements, principal, actions)]


def _rule_to_queue(t: _Template, rule: str, queue: str, why: str) -> list[str]:
    out = _queue_encryption_problems(t, queue, "events.amazonaws.com", ("kms:GenerateDataKey", "kms:Decrypt"), why)
    rule_arn = {"Fn::GetAtt": [rule, "Arn"]}
    admitted = False
    for statement in t.queue_policy_statements(queue):
        if not _allows(statement, "events.amazonaws.com", "sqs:SendMessage"):
            continue
        conditions = statement.get("Condition") or {}
        arns = [v for op in ("ArnEquals", "ArnLike") for v in _list((conditions.get(op) or {}).get("aws:SourceArn", []))]
        if rule_arn in arns:
            admitted = True
    if not admitted:
        out.append(f"{why}: the policy of queue {queue} does not let events.amazonaws.com send with aws:SourceArn = rule {rule}")
    return out


def _rule_problems(t: _Template) -> list[str]:
    out: list[str] = []
    permissions = [p for _, p in t.of_type("AWS::Lambda::Permission")]
    for rule, properties in t.of_type("AWS::Events::Rule"):
        for target in properties.get("Targets", []):
            arn = target.get("Arn")
            queue = _logical(arn, "Arn")
            if queue is not None and t.resources[queue]["Type"] == "AWS::SQS::Queue":
                out += _rule_to_queue(t, rule, queue, f"rule {rule} -> queue")
            function = queue if queue is not None and t.resources[queue]["Type"] == "AWS::Lambda::Function" else None
            if function is not None and not any(
                p.get("Principal") == "events.amazonaws.com"
                and p.get("Action") == "lambda:InvokeFunction"
                and _logical(p.get("FunctionName"), "Arn") == function
                and p.get("SourceArn") == {"Fn::GetAtt": [rule, "Arn"]}
                for p in permissions
            ):
                out.append(f"rule {rule} -> function {function}: no lambda permission for events.amazonaws.com from this rule")
            dead_letter = _logical((target.get("DeadLetterConfig") or {}).get("Arn"), "Arn")
            if dead_letter is not None:
                out += _rule_to_queue(t, rule, dead_letter, f"rule {rule} -> dead-letter queue")
    return out


def _alarm_problems(t: _Template) -> list[str]:
    out: list[str] = []
    topics = {
        ref
        for _, p in t.of_type("AWS::CloudWatch::Alarm")
        for ref in (_logical(a) for a in [*p.get("AlarmActions", []), *p.get("OKActions", [])])
        if ref is not None
    }
    for topic in sorted(topics):
        if t.resources[topic]["Type"] != "AWS::SNS::Topic":
            continue
        if not any(_allows(s, "cloudwatch.amazonaws.com", "sns:Publish") for s in t.topic_policy_statements(topic)):
            out.append(f"alarms -> topic {topic}: the topic policy does not let cloudwatch.amazonaws.com publish")
        key = t.resources[topic].get("Properties", {}).get("KmsMasterKeyId")
        if key is not None:
            statements = t.key_policy_statements(key)
            if statements is None:
                out.append(f"alarms -> topic {topic}: a key outside the stack cannot be checked")
            else:
                out += [f"alarms -> topic {topic}: {m}" for m in _key_grants(statements, "cloudwatch.amazonaws.com", ("kms:Decrypt", "kms:GenerateDataKey"))]
    return out


def _role_allows(statements: list[Mapping[str, Any]], action: str, resource: Any) -> bool:
    for statement in statements:
        if statement.get("Effect") != "Allow" or statement.get("Condition"):
            continue
        if not any(fnmatch.fnmatchcase(action.lower(), str(a).lower()) for a in _list(statement.get("Action", []))):
            continue
        if resource in _list(statement.get("Resource")) or "*" in _list(statement.get("Resource")):
            return True
    return False


def _event_source_problems(t: _Template) -> list[str]:
    out: list[str] = []
    for mapping, properties in t.of_type("AWS::Lambda::EventSourceMapping"):
        queue = _logical(properties.get("EventSourceArn"), "Arn")
        function = _logical(properties.get("FunctionName"))
        if queue is None or function is None or t.resources[queue]["Type"] != "AWS::SQS::Queue":
            continue
        function_properties = t.resources[function]["Properties"]
        role = _logical(function_properties["Role"], "Arn")
        assert role is not None
        statements = t.role_statements(role)
        queue_arn = {"Fn::GetAtt": [queue, "Arn"]}
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"):
            if not _role_allows(statements, action, queue_arn):
                out.append(f"event source {mapping}: role {role} may not {action} on queue {queue}")
        key = t.resources[queue].get("Properties", {}).get("KmsMasterKeyId")
        if key is not None and not _role_allows(statements, "kms:Decrypt", key):
            out.append(f"event source {mapping}: role {role} may not kms:Decrypt with the key of queue {queue}")
        timeout = int(function_properties.get("Timeout", 3))
        visibility = int(t.resources[queue].get("Properties", {}).get("VisibilityTimeout", 30))
        window = int(properties.get("MaximumBatchingWindowInSeconds", 0))
        if visibility <= timeout + window:
            out.append(
                f"event source {mapping}: queue {queue} visibility {visibility} s does not outlast "
                f"function {function}'s timeout ({timeout} s) and batching window ({window} s)"
            )
    return out


def problems(template: Mapping[str, Any]) -> list[str]:
    """Every service-principal wiring in ``template`` that AWS would refuse, one line each."""
    t = _Template(template)
    return [*_rule_problems(t), *_alarm_problems(t), *_event_source_problems(t)]
