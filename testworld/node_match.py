"""kube-scheduler's node filters, literally: NodeAffinity (``nodeSelector`` and required node
affinity) and TaintToleration, evaluated on the raw Pod and Node objects.

Nothing here normalises label keys. Joiner's planner reads ``karpenter.sh/*`` and
``karpenter.k8s.aws/*`` keys as aliases of its own, but kube-scheduler does not: a pod that
selects ``karpenter.sh/capacity-type: spot`` binds only to a Node that carries exactly that key.
The simulator's scheduler uses these functions so that a Node missing a label a workload
selects stays unbound in the simulation as it would in a cluster.

Semantics follow ``k8s.io/component-helpers/scheduling/corev1/nodeaffinity`` and
``.../corev1`` (``TolerationsTolerateTaint``):

* ``nodeSelector``: every key present with exactly that value;
* ``nodeSelectorTerms``: ORed; a term's ``matchExpressions`` and ``matchFields`` ANDed; a term
  with neither matches nothing, as does an empty list of terms;
* ``In`` / ``NotIn`` (``NotIn`` holds when the label is absent), ``Exists`` / ``DoesNotExist``,
  ``Gt`` / ``Lt`` (exactly one value; label and value parsed as integers, a value that does
  not parse matches nothing); an unknown operator matches nothing;
* ``matchFields``: ``metadata.name`` with ``In`` / ``NotIn``;
* a taint with effect ``NoSchedule`` or ``NoExecute`` must be tolerated (``PreferNoSchedule``
  only scores); a toleration with an empty key and ``Exists`` tolerates every taint, an empty
  effect every effect, ``Equal`` (the default) compares values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "node_affinity_misfit",
    "node_selector_matches",
    "node_selector_term_matches",
    "requirement_matches",
    "toleration_tolerates",
    "untolerated_taint",
]

_INTEGER = re.compile(r"^[+-]?[0-9]+$")


def _integer(text: Any) -> int | None:
    if not isinstance(text, str) or not _INTEGER.match(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One ``NodeSelectorRequirement`` (``key``, ``operator``, ``values``) against a label map."""
    key = requirement.get("key")
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if not isinstance(key, str):
        return False
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, bound = _integer(labels[key]), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def node_selector_term_matches(term: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """One ``NodeSelectorTerm`` against a Node object: expressions and fields ANDed; empty never matches."""
    if not term:
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if not all(requirement_matches(requirement, labels) for requirement in expressions):
        return False
    for requirement in fields:
        if requirement.get("key") != "metadata.name" or requirement.get("operator") not in ("In", "NotIn"):
            return False
        if not requirement_matches(requirement, {"metadata.name": str(metadata.get("name", ""))}):
            return False
    return True


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A ``NodeSelector``: any of its ``nodeSelectorTerms`` matches (none given: nothing matches)."""
    terms: Sequence[Mapping[str, Any]] = (selector or {}).get("nodeSelectorTerms") or []
    return any(node_selector_term_matches(term, node) for term in terms)


def node_affinity_misfit(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why the NodeAffinity filter rejects ``node`` for ``pod`` (kube-scheduler's wording), or None."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return "didn't match Pod's node affinity/selector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None and not node_selector_matches(required, node):
        return "didn't match Pod's node affinity/selector"
    return None


def toleration_tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first ``NoSchedule``/``NoExecute`` taint of ``node`` no toleration of ``pod`` tolerates."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_tolerates(toleration, taint) for toleration in tolerations):
            return dict(taint)
    return None
