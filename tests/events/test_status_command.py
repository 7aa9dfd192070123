"""``joiner status`` against a running Joiner: the state table on moto (over HTTP, as the AWS
CLI would reach it) and the cluster through a kubeconfig pointing at the emulator, after a
spot warning left a termination and a replacement claim in flight (issue 16 §2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.stack import stack_name_for
from joiner.cli.main import main
from joiner.services.status import format_age
from tests.events.world import REGION, World


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "emulator",
                "clusters": [{"name": "emulator", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "me"}}],
            }
        )
    )
    return path


@pytest.fixture
def interrupted(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("AWS_ENDPOINT_URL", world.moto.endpoint)
    instance = world.launch_node("n1")
    for name in ("web-0", "web-1", "web-2"):
        world.add_pod(name, "n1", app="web", grace=30)
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }
    world.emulator.apply(pending)
    world.kube.create_event(pending, "FailedScheduling", "NodePool default: no instance type fits requests cpu=500", "Warning")
    return world


def _status(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["status", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_shows_pools_claims_terminations_pending_pods_and_decisions(
    interrupted: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = interrupted
    kubeconfig = _kubeconfig(tmp_path, world.emulator.url)
    at = world.clock.now().isoformat()
    code, out, err = _status(capsys, "--table", world.settings.state_table, "--region", REGION, "--kubeconfig", str(kubeconfig), "--at", at, "-o", "json")
    assert code == 0, err
    status: dict[str, Any] = json.loads(out)

    (pool,) = status["nodePools"]
    assert pool["name"] == "default" and pool["nodeClass"] == "default" and pool["nodes"] == 1
    assert pool["capacity"]["cpu"] == "4"  # the c5.xlarge Node's capacity
    replacements = [c for c in status["claimsInFlight"] if c["claim"] != "default-n1"]
    assert replacements and all(c["state"] in ("reserved", "launched") and c["nodePool"] == "default" for c in replacements)
    assert pool["inFlight"] == len(replacements) and pool["reserved"].get("cpu")
    (termination,) = status["terminations"]
    assert termination["node"] == "n1" and termination["deadline"]
    (pod,) = status["pendingPods"]
    assert pod == {"pod": "default/big", "age": pod["age"], "reason": "NodePool default: no instance type fits requests cpu=500"}
    reasons = {(d["object"], d["reason"]) for d in status["recentDecisions"]}
    assert ("Node/n1", "Terminating") in reasons and ("Pod/big", "FailedScheduling") in reasons

    code, table, err = _status(capsys, "--table", world.settings.state_table, "--region", REGION, "--kubeconfig", str(kubeconfig), "--at", at)
    assert code == 0, err
    for section in ("NODEPOOLS", "CLAIMS IN FLIGHT", "TERMINATIONS", "PENDING PODS", "RECENT DECISIONS"):
        assert section in table
    assert replacements[0]["claim"] in table and "default/big" in table


def test_bad_inputs_exit_2_with_one_line(interrupted: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    world = interrupted
    code, out, err = _status(capsys, "--table", world.settings.state_table, "--region", REGION, "--kubeconfig", str(tmp_path / "missing"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "does not exist" in err
    kubeconfig = _kubeconfig(tmp_path, world.emulator.url)
    code, out, err = _status(capsys, "--table", "no-such-table", "--region", REGION, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "ResourceNotFound" in err
    code, out, err = _status(capsys, "--region", REGION, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "") and "give --table, --stack or --cluster" in err
    code, out, err = _status(capsys, "--table", "t", "--region", REGION, "--kubeconfig", str(kubeconfig), "--at", "yesterday")
    assert (code, out) == (2, "") and "is not an ISO 8601 time" in err


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (312, "5m12s"),
        (600, "10m"),
        (7440, "124m"),
        (11040, "3h4m"),
        (30 * 3600, "30h"),
        (51 * 3600, "2d3h"),
        (400 * 86400, "400d"),
    ],
)
def test_ages_print_as_kubectl_prints_them(seconds: int, shown: str) -> None:
    assert format_age(seconds) == shown


def test_the_table_is_found_through_the_stack_output(interrupted: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import boto3

    world = interrupted
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {"JoinerStateTableName4A2F": {"Value": world.settings.state_table}},
    }
    cloudformation = boto3.client("cloudformation", endpoint_url=world.moto.endpoint, region_name=REGION)
    cloudformation.create_stack(StackName=stack_name_for("test-cluster"), TemplateBody=json.dumps(template))
    kubeconfig = _kubeconfig(tmp_path, world.emulator.url)
    code, out, err = _status(
        capsys, "--cluster", "test-cluster", "--region", REGION, "--kubeconfig", str(kubeconfig), "--at", world.clock.now().isoformat(), "-o", "json"
    )
    assert code == 0, err
    assert [t["node"] for t in json.loads(out)["terminations"]] == ["n1"]
    code, out, err = _status(capsys, "--stack", "Joiner-other", "--region", REGION, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "") and err.startswith("joiner status: stack Joiner-other:")
