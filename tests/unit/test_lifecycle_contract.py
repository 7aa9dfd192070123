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
    return [(node.lineno, node.func.attr, node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]


def _shipped() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != OWNER and p not in PORTS)


def test_nothing_but_the_lifecycle_terminates_an_instance() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in _shipped() for line, name, _ in _calls(path) if name == "terminate_instances"]
    assert found == []


def test_nothing_but_the_lifecycle_changes_a_claims_state() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in _shipped() for line, name, call in _calls(path)
             if name == "update_claim" and any(k.arg in ("state", "expected_state") for k in call.keywords)]
    assert found == []


def test_the_lifecycle_is_used_by_every_path_that_ends_a_claim() -> None:
    users = sorted(path.stem for path in _shipped() if "joiner.services.lifecycle" in path.read_text(encoding="utf-8"))
    assert {"deletion", "gc", "interruption", "launcher", "registration", "termination"} <= set(users)


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
