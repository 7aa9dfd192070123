"""One owner for a NodeClaim's life: only :mod:`joiner.services.lifecycle` changes a claim's
state or terminates an instance, and each transition it makes is one the table allows."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from joiner.domain.lifecycle import OPEN_STATES, TRANSITIONS, allowed, sources
from joiner.ports import ClaimState

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "joiner" / "python" / "joiner"
OWNER = PACKAGE / "services" / "lifecycle.py"
#: The adapters implement the ports these calls go through; the ports declare them.
PORTS = {PACKAGE / "ports.py", PACKAGE / "adapters" / "ec2.py", PACKAGE / "adapters" / "state.py"}


def _calls(path: Path) -> list[tuple[int, str, ast.Call]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [(node.lineno, node.func.attr, node) for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]


def _shipped() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != OWNER and p not in PORTS)


def test_nothing_but_the_lifecycle_terminates_an_instance() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in _shipped() for line, name, _ in _calls(path) if name == "terminate_instances"]
    assert found == []


def test_nothing_but_the_lifecycle_changes_a_claims_state() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in _shipped()
        for line, name, call in _calls(path)
        if name == "update_claim" and any(k.arg in ("state", "expected_state") for k in call.keywords)
    ]
    assert found == []


def test_the_lifecycle_is_used_by_every_path_that_ends_a_claim() -> None:
    users = sorted(path.stem for path in _shipped() if "joiner.services.lifecycle" in path.read_text(encoding="utf-8"))
    assert {"deletion", "drain_step", "gc", "interruption", "launcher", "registration", "termination"} <= set(users)


def test_closed_is_final_and_every_open_state_can_close() -> None:
    assert TRANSITIONS[ClaimState.CLOSED] == frozenset()
    assert set(sources(ClaimState.CLOSED)) == set(OPEN_STATES)
    assert set(TRANSITIONS) == set(ClaimState)


@pytest.mark.parametrize("current", list(ClaimState))
@pytest.mark.parametrize("target", list(ClaimState))
def test_transitions_only_move_forward(current: ClaimState, target: ClaimState) -> None:
    order = list(ClaimState)
    assert allowed(current, target) == (target in TRANSITIONS[current])
    if allowed(current, target):
        assert order.index(target) > order.index(current)
    assert not allowed("no-such-state", target)


def _is_round(node: ast.expr) -> bool:
    """``work``, ``self.work``, ``launcher.work``, ``self._round``: a PlanningRound by the names the services give it."""
    if isinstance(node, ast.Name):
        return node.id in ("work", "round_")
    return isinstance(node, ast.Attribute) and node.attr in ("work", "_round")


def test_no_module_but_the_planning_round_assigns_its_attributes() -> None:
    """A round is built complete by its constructors and changed through its own methods:
    another module assigning its fields (or items of them) means a seam is missing."""
    found = []
    for path in sorted((PACKAGE / "services").glob("*.py")):
        if path.name == "planning_round.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for target in targets:
                inner = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(inner, ast.Attribute) and _is_round(inner.value):
                    found.append(f"{path.name}:{target.lineno}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add", "update", "discard", "pop", "clear", "setdefault")
                and isinstance(node.func.value, ast.Attribute)
                and _is_round(node.func.value.value)
            ):
                found.append(f"{path.name}:{node.lineno} mutates {node.func.value.attr}")
    assert found == []


def test_a_planning_round_has_every_attribute_from_its_constructor() -> None:
    from joiner.services.planning_round import PlanningRound
    from tests.support.fakes import fake_world

    world = fake_world()
    fresh = set(vars(PlanningRound(world.runtime(), world.clock.now())))
    built = PlanningRound.for_cluster(world.runtime(), world.clock.now())
    assert set(vars(built)) == fresh  # no method creates an attribute


def test_begin_termination_takes_a_request_and_few_parameters() -> None:
    """What an event asks is one :class:`TerminationRequest` value; the node's pods are
    replaced through the replacement seam itself, never a callback into the caller."""
    import dataclasses
    import inspect

    from joiner.services.replacement import ClusterView
    from joiner.services.termination import TerminationRequest, begin_termination

    parameters = inspect.signature(begin_termination).parameters
    assert len(parameters) <= 5
    assert "request" in parameters and "replace_pods" not in parameters
    with pytest.raises(dataclasses.FrozenInstanceError):
        TerminationRequest("n1", "spot-interruption").reason = "changed"  # type: ignore[misc]
    assert callable(ClusterView.replace_node)
