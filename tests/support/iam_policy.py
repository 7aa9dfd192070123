"""An IAM policy evaluator for the statements, condition operators and request context this
stack uses, strict where it is not sure.

``evaluate(statements, authorization)`` decides one authorization (one action on one
resource with its condition context) the way IAM does for identity policies in one account:
an explicit ``Deny`` wins, otherwise some ``Allow`` must match, otherwise the request is
implicitly denied. A statement matches when its ``Action``/``NotAction`` matches the action
(case-insensitive, ``*`` and ``?`` wildcards), its ``Resource``/``NotResource`` matches the
ARN (case-sensitive wildcards) and every condition holds.

Conditions: operators AND together, keys within an operator AND together, values of a key
OR together; key names are case-insensitive, values of ``String*`` operators are
case-sensitive. A key absent from the context makes a plain operator false and a
``ForAllValues:`` operator true (IAM's documented semantics; the reason Karpenter pairs
``ForAllValues`` with other conditions). Operators, policy variables and anything else this
evaluator does not implement raise :class:`UnsupportedPolicy` rather than being guessed.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SUPPORTED_OPERATORS",
    "Authorization",
    "Decision",
    "UnsupportedPolicy",
    "action_matches",
    "evaluate",
    "resource_matches",
]


class UnsupportedPolicy(Exception):
    """A policy construct or request this evaluator cannot decide soundly."""


@dataclass(frozen=True)
class Authorization:
    """One action on one resource, with the request context IAM would evaluate.

    ``context`` maps condition keys (any case) to a string or a list of strings (multivalued
    keys such as ``aws:TagKeys``). ``known_absent`` are key patterns the request model
    asserts are genuinely absent when not in ``context`` (e.g. ``aws:RequestTag/*`` when the
    request tags nothing); a statement conditioning on any other key missing from the
    context raises :class:`UnsupportedPolicy`, since the real request might carry it.
    """

    action: str
    resource: str
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)
    known_absent: tuple[str, ...] = ()
    #: what made this authorization necessary (for messages): "CreateFleet: network-interface"
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    explicitly_denied: bool
    #: Sids (or indexes) of the statements that allowed or denied
    matched: tuple[str, ...]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _check_no_variables(value: str) -> None:
    if "${" in value:
        raise UnsupportedPolicy(f"policy variables are not supported: {value!r}")


def action_matches(pattern: str, action: str) -> bool:
    """IAM action match: case-insensitive, ``*`` any run of characters, ``?`` one character."""
    _check_no_variables(pattern)
    return fnmatch.fnmatchcase(action.lower(), pattern.lower())


def resource_matches(pattern: str, arn: str) -> bool:
    """IAM resource match: case-sensitive, ``*`` and ``?`` wildcards within and across ARN segments."""
    if not isinstance(pattern, str):
        raise UnsupportedPolicy(f"unresolved resource {pattern!r}")
    _check_no_variables(pattern)
    return re.fullmatch(_wildcard_regex(pattern), arn) is not None


def _wildcard_regex(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def _string_like(pattern: str, value: str) -> bool:
    return re.fullmatch(_wildcard_regex(pattern), value, flags=re.DOTALL) is not None


def _arn_like(pattern: str, value: str) -> bool:
    # ArnLike compares the six colon-separated parts, each with wildcards.
    pattern_parts, value_parts = pattern.split(":", 5), value.split(":", 5)
    if len(pattern_parts) != 6 or len(value_parts) != 6:
        return False
    return all(_string_like(p, v) for p, v in zip(pattern_parts, value_parts, strict=True))


def _bool(expected: str, value: str) -> bool:
    return expected.lower() == value.lower()


#: operator -> value test(policy value, request value)
_BASE_OPERATORS = {
    "StringEquals": lambda expected, value: expected == value,
    "StringLike": _string_like,
    "ArnEquals": lambda expected, value: expected == value,
    "ArnLike": _arn_like,
    "Bool": _bool,
}
_NEGATED = {"StringNotEquals": "StringEquals", "StringNotLike": "StringLike", "ArnNotEquals": "ArnEquals", "ArnNotLike": "ArnLike"}
SUPPORTED_OPERATORS = frozenset(
    {*_BASE_OPERATORS, *_NEGATED} | {f"{prefix}:{op}" for prefix in ("ForAllValues", "ForAnyValue") for op in ("StringEquals", "StringLike")}
)


def _lookup(context: Mapping[str, str | Sequence[str]], key: str) -> list[str] | None:
    lowered = key.lower()
    for name, value in context.items():
        if name.lower() == lowered:
            return [value] if isinstance(value, str) else list(value)
    return None


def _known_absent(authorization: Authorization, key: str) -> bool:
    return any(fnmatch.fnmatchcase(key.lower(), pattern.lower()) for pattern in authorization.known_absent)


def _condition_holds(operator: str, key: str, expected_values: list[Any], authorization: Authorization) -> bool:
    if operator not in SUPPORTED_OPERATORS:
        raise UnsupportedPolicy(f"condition operator {operator!r} is not supported")
    expected = [str(v).lower() if isinstance(v, bool) else v for v in expected_values]
    for value in expected:
        if not isinstance(value, str):
            raise UnsupportedPolicy(f"unresolved condition value {value!r} for {key}")
        _check_no_variables(value)
    values = _lookup(authorization.context, key)
    if values is None and not _known_absent(authorization, key):
        raise UnsupportedPolicy(f"{authorization.action} on {authorization.resource}: the request model does not supply condition key {key!r}")
    qualifier, _, base = operator.rpartition(":")
    if qualifier == "ForAllValues":
        test = _BASE_OPERATORS[base]
        return all(any(test(e, v) for e in expected) for v in values or [])
    if qualifier == "ForAnyValue":
        test = _BASE_OPERATORS[base]
        return any(any(test(e, v) for e in expected) for v in values or [])
    if values is None:
        # A negated operator on an absent key is true, a positive one false.
        return operator in _NEGATED
    if len(values) != 1:
        raise UnsupportedPolicy(f"multivalued key {key!r} needs ForAllValues/ForAnyValue")
    if operator in _NEGATED:
        test = _BASE_OPERATORS[_NEGATED[operator]]
        return not any(test(e, values[0]) for e in expected)
    test = _BASE_OPERATORS[operator]
    return any(test(e, values[0]) for e in expected)


def _statement_matches(statement: Mapping[str, Any], authorization: Authorization) -> bool:
    unknown = set(statement) - {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}
    if unknown:
        raise UnsupportedPolicy(f"statement elements {sorted(unknown)} are not supported (identity policies only)")
    if ("Action" in statement) == ("NotAction" in statement):
        raise UnsupportedPolicy("a statement needs exactly one of Action and NotAction")
    if ("Resource" in statement) == ("NotResource" in statement):
        raise UnsupportedPolicy("a statement needs exactly one of Resource and NotResource")
    if "Action" in statement:
        if not any(action_matches(p, authorization.action) for p in _as_list(statement["Action"])):
            return False
    elif any(action_matches(p, authorization.action) for p in _as_list(statement["NotAction"])):
        return False
    if "Resource" in statement:
        if not any(resource_matches(p, authorization.resource) for p in _as_list(statement["Resource"])):
            return False
    elif any(resource_matches(p, authorization.resource) for p in _as_list(statement["NotResource"])):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, expected in keys.items():
            if not _condition_holds(operator, key, _as_list(expected), authorization):
                return False
    return True


def evaluate(statements: Iterable[Mapping[str, Any]], authorization: Authorization) -> Decision:
    """IAM's decision for ``authorization`` under identity-policy ``statements``."""
    allows: list[str] = []
    denies: list[str] = []
    for index, statement in enumerate(statements):
        effect = statement.get("Effect")
        if effect not in ("Allow", "Deny"):
            raise UnsupportedPolicy(f"statement effect {effect!r}")
        if _statement_matches(statement, authorization):
            (allows if effect == "Allow" else denies).append(str(statement.get("Sid") or index))
    if denies:
        return Decision(False, True, tuple(denies))
    return Decision(bool(allows), False, tuple(allows))
