"""``joiner uninstall`` end to end: the CLI reaching the Kubernetes emulator through a kubeconfig,
a Joiner still running beside it (claims in DynamoDB on moto, its garbage collection and
delete-to-drain passes through the real adapters)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from joiner.cli.main import main
from joiner.domain.nodeclaims import TERMINATION_FINALIZER
from joiner.ports import ClaimRecord
from joiner.services.deletion import UNINSTALLING_ANNOTATION, handle_deletions
from joiner.services.gc import collect_garbage
from joiner.services.nodeclaims import sync_node_claims
from tests.events.world import T0, World

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

F = TERMINATION_FINALIZER


def kubeconfig(tmp_path: Path, server: str = "http://127.0.0.1:1", **edits: Any) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "me"}}],
    }
    config.update(edits)
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return path


def uninstall(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["uninstall", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def finalizers(world: World) -> dict[str, list[str]]:
    """Every Node's and NodeClaim mirror's finalizers, by ``kind/name``."""
    found = {f"node/{n['metadata']['name']}": n["metadata"].get("finalizers") or [] for n in world.emulator.list("Node")}
    found.update({f"nodeclaim/{m['metadata']['name']}": m["metadata"].get("finalizers") or [] for m in world.emulator.list("NodeClaim")})
    return found


def held(world: World) -> dict[str, list[str]]:
    """The objects that still carry a finalizer."""
    return {key: found for key, found in finalizers(world).items() if found}


@pytest.fixture
def running(world: World) -> World:
    """Two Joiner nodes, their mirrors, and Joiner's finalizer on all four."""
    world.launch_node("n1")
    world.launch_node("n2")
    sync_node_claims(world.runtime)
    handle_deletions(world.runtime, world.clock.now())
    assert finalizers(world) == {"node/n1": [F], "node/n2": [F], "nodeclaim/default-n1": [F], "nodeclaim/default-n2": [F]}
    return world


def test_a_concurrent_write_during_uninstall_is_retried_and_every_finalizer_goes(
    running: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a status write lands between uninstall's list and its conditional patch: the API server answers 409
    conflict = running.emulator.fail_next("PATCH", r"/nodeclaims/default-n1$", status=409, message="the object has been modified")
    code, out, err = uninstall(capsys, "--kubeconfig", str(kubeconfig(tmp_path, running.emulator.url)))
    assert (code, err) == (0, "")
    assert conflict.hits == 1
    assert held(running) == {}
    assert out.splitlines()[-1] == "4 finalizer(s) removed"


def test_uninstall_goes_past_an_object_it_cannot_change_and_names_it(
    running: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    running.emulator.fail_next("PATCH", r"/nodeclaims/default-n1$", status=409, times=100)
    code, out, err = uninstall(capsys, "--kubeconfig", str(kubeconfig(tmp_path, running.emulator.url)))
    assert code == 1
    assert finalizers(running) == {"node/n1": [], "node/n2": [], "nodeclaim/default-n1": [F], "nodeclaim/default-n2": []}
    assert out.splitlines()[-1] == "3 finalizer(s) removed"
    assert err.splitlines()[-1] == "joiner uninstall: 1 finalizer(s) could not be removed: nodeclaim/default-n1"
    assert "nodeclaim/default-n1: " in err and "409" in err


def test_joiner_adds_no_finalizer_while_uninstalling_until_it_is_undone(
    running: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = str(kubeconfig(tmp_path, running.emulator.url))
    assert uninstall(capsys, "--kubeconfig", config)[0] == 0
    collect_garbage(running.runtime)  # every 5 minutes: its delete-to-drain pass, then the mirrors' sync
    assert held(running) == {}
    result = handle_deletions(running.runtime, running.clock.now())  # the disruption pass's, every minute
    assert result.finalizers_added == [] and held(running) == {}
    assert running.emulator.get("Node", "n1")["metadata"]["annotations"][UNINSTALLING_ANNOTATION]

    # a claim launched meanwhile: its mirror is created without the finalizer
    running.runtime.state.put_claim(ClaimRecord("default-c3", "default", "launched", T0, instance_id="i-0000000000000c3c3"))
    sync_node_claims(running.runtime)
    assert "finalizers" not in running.emulator.get("NodeClaim", "default-c3")["metadata"]
    result = handle_deletions(running.runtime, running.clock.now())
    assert (result.finalizers_added, result.finalizers_released) == ([], [])
    assert held(running) == {}

    code, out, err = uninstall(capsys, "--kubeconfig", config, "--undo")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "uninstall marker removed from 4 object(s)"  # the mirror created since carries none
    result = handle_deletions(running.runtime, running.clock.now())
    assert sorted(result.finalizers_added) == ["node/n1", "node/n2", "nodeclaim/default-c3", "nodeclaim/default-n1", "nodeclaim/default-n2"]


#: case -> (the kubeconfig's edits, or its whole text), the arguments, what the one line says
BAD_KUBECONFIGS: dict[str, tuple[dict[str, Any] | str, tuple[str, ...], str]] = {
    "no-current-context": ({"current-context": None}, (), "has no current-context (pass --context NAME)"),
    "unknown-context": ({}, ("--context", "prod"), "has no context 'prod' (its contexts: emulator)"),
    "unparseable-yaml": ("clusters: [unclosed\n  : : :\n", (), "is not valid YAML"),
    "empty": ("", (), "is empty"),
    "not-a-mapping": ("just a string\n", (), "is not a kubeconfig (a mapping)"),
}


@pytest.mark.parametrize("case", sorted(BAD_KUBECONFIGS))
def test_an_unusable_kubeconfig_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content, argv, message = BAD_KUBECONFIGS[case]
    if isinstance(content, dict):
        path = kubeconfig(tmp_path, **content)
    else:
        path = tmp_path / "kubeconfig"
        path.write_text(content)
    code, out, err = uninstall(capsys, "--kubeconfig", str(path), *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"joiner uninstall: kubeconfig {path} ") and message in err


def test_a_kubeconfig_that_is_a_directory_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = uninstall(capsys, "--kubeconfig", str(tmp_path))
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith(f"joiner uninstall: kubeconfig {tmp_path} ")
