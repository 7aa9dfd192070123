"""bench.scale's stand-in API server keeps Kubernetes' list and watch semantics and counts
what it serves; ``python -m bench.scale --quick`` prints the promised keys."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.kube_standin import StandIn
from bench.scale_world import WorldSpec
from joiner.adapters.kubernetes import KubernetesClient
from joiner.ports import KubernetesError, WatchExpired

ROOT = Path(__file__).resolve().parents[2]
NODES = 40


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(NODES, history=30, token="t", bookmark_seconds=0.2) as server:
        yield server


@pytest.fixture
def kube(standin: StandIn) -> Iterator[KubernetesClient]:
    standin.mutate({"op": "reset_world"})
    standin.reset()
    client = KubernetesClient(standin.url, token="t", page_size=500, max_attempts=1)
    yield client
    client.close()


def test_a_full_pod_list_pages_by_the_limit_and_is_counted(standin: StandIn, kube: KubernetesClient) -> None:
    spec = WorldSpec(NODES)
    pods = kube.list_pods()
    stats = standin.stats()
    assert len(pods) == spec.pods == 30 * NODES
    assert len({(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods}) == spec.pods
    assert stats["by_verb"] == {"list": math.ceil(spec.pods / 500)}
    assert stats["full_pod_lists"] == 1 and stats["full_pod_list_pages"] == math.ceil(spec.pods / 500)
    assert stats["bytes_sent"] > 6_000 * spec.pods  # realistic objects: about 7 KB a pod
    nodes = kube.list_nodes()
    assert len(nodes) == NODES and standin.stats()["by_resource"]["nodes"]["bytes"] > 11_000 * NODES


def test_field_selectors_select_by_node_and_binding(standin: StandIn, kube: KubernetesClient) -> None:
    spec = WorldSpec(NODES)
    node = spec.node_name(7)
    on_node = kube.list_pods_on_node(node)
    assert {p["spec"]["nodeName"] for p in on_node} == {node} and len(on_node) in (29, 30)
    unbound, version = kube.list_unbound_pods()
    assert len(unbound) == spec.pending and int(version) > 0
    assert len(kube.list_pending_pods()) == spec.pending
    running = kube.list_pods(field_selector="status.phase!=Pending,metadata.namespace=kube-system")
    assert len(running) == 3 * NODES
    labelled = kube.list_pods(label_selector="k8s-app=kube-proxy")
    assert len(labelled) == NODES
    assert standin.stats()["full_pod_lists"] == 0  # filtered lists are not full lists
    with pytest.raises(KubernetesError) as error:
        kube.list_pods(field_selector="spec.schedulerName=x")
    assert error.value.status == 400


def test_a_watch_replays_changes_after_its_version_and_a_compacted_one_gets_410(standin: StandIn, kube: KubernetesClient) -> None:
    _, version = kube.list_unbound_pods()
    standin.mutate({"op": "add_pending", "count": 2}, {"op": "bind_pending", "count": 1}, {"op": "add_running", "count": 3})
    events = list(kube.watch_unbound_pods(version, 1))
    kinds = [e.type for e in events if e.type != "BOOKMARK"]
    # two pods became pending, one pending pod was bound (it leaves the selection); running pods never match
    assert sorted(kinds) == ["ADDED", "ADDED", "DELETED"]
    assert events[-1].type == "BOOKMARK" and int(events[-1].resource_version) >= int(events[-2].resource_version)
    standin.mutate({"op": "touch_pods", "count": 40})  # more events than the history keeps
    with pytest.raises(WatchExpired):
        list(kube.watch_unbound_pods(version, 1))
    assert standin.stats()["gone_410"] == 1


def test_patches_evictions_and_preconditions(standin: StandIn, kube: KubernetesClient) -> None:
    spec = WorldSpec(NODES)
    node = kube.patch_node(spec.node_name(3), {"spec": {"unschedulable": True}, "metadata": {"labels": {"x": "y"}}})
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"]["x"] == "y"
    assert node["spec"]["providerID"].startswith("aws:///us-east-1")
    pod = kube.list_pods_on_node(spec.node_name(3))[0]
    assert kube.evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"]).status == "evicted"
    assert kube.evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"]).status == "gone"
    assert kube.delete_node(spec.node_name(4), uid="someone-else") is False
    assert kube.get_node(spec.node_name(4)) is not None
    claims = kube.list_node_claims()
    assert len(claims) == NODES
    assert kube.patch_node_claim(claims[0]["metadata"]["name"], {"status": {"state": "terminating"}}, status=True)
    with pytest.raises(KubernetesError) as error:
        kube.patch_node(spec.node_name(3), {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": False}})
    assert error.value.status == 409


def test_a_continuation_older_than_the_history_expires(standin: StandIn) -> None:
    standin.mutate({"op": "reset_world"})
    client = KubernetesClient(standin.url, token="t", page_size=100, max_attempts=1)
    calls: list[str] = []
    original = client._request

    def compacting(method, path, **kw):  # type: ignore[no-untyped-def]
        answer = original(method, path, **kw)
        if (kw.get("query") or {}).get("limit") and not calls:
            standin.mutate({"op": "touch_pods", "count": 40})  # between the first and second page
        calls.append(path)
        return answer

    client._request = compacting  # type: ignore[method-assign]
    assert len(client.list_pods()) == WorldSpec(NODES).pods  # the adapter lists again after the 410
    assert standin.stats()["gone_410"] >= 1


def test_quick_run_prints_every_line_with_the_promised_keys() -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'layers/joiner/python'}{os.pathsep}{ROOT}")
    run = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--nodes", "30", "--minutes", "1", "--functions", "watcher,termination,nodeclaim_sync,scanner"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    (image,) = [line for line in lines if line["function"] == "image_write"]
    assert image["image_mb"] > 0 and image["objects"] > 30 * 30  # every pod and Node
    functions = [line for line in lines if line["function"] not in ("steady", "image_write")]
    assert [line["function"] for line in functions] == ["watcher", "termination", "nodeclaim_sync", "scanner"]
    scanner = functions[-1]
    # a cold scanner restores the image a warm one wrote and lists no pods
    assert scanner["image_restored"] and scanner["state_load_s"] is not None and scanner["full_pod_lists"] == 0
    assert scanner["cold_read_mb"] >= scanner["api_read_mb"]
    for line in functions:
        assert {
            "bench",
            "function",
            "nodes",
            "pods",
            "pending",
            "peak_rss_mb",
            "wall_s",
            "memory_limit_mb",
            "timeout_s",
            "api_requests",
            "api_read_mb",
            "baseline_rss_mb",
            "lambda_vcpu",
            "lambda_wall_s",
            "targets",
        } <= set(line), line
        assert line["lambda_wall_s"] >= line["wall_s"] and line["lambda_vcpu"] == round(min(1.0, line["memory_limit_mb"] / 1769), 3)
        assert line["targets"]["lambda_wall_s_max"] == round(line["timeout_s"] / 3, 1)
        assert "error" not in line, line
        assert line["peak_rss_mb"] >= line["baseline_rss_mb"] > 0 and line["api_requests"] > 0
    assert functions[0]["memory_limit_mb"] == 128 and functions[0]["timeout_s"] == 62  # infra/deployment.py's watcher
    steady = [line for line in lines if line["function"] == "steady"]
    assert [line["mode"] for line in steady] == ["responsive", "economy"]
    for line in steady:
        assert {"api_read_mb_per_minute", "full_pod_lists", "minutes", "nodes"} <= set(line) and line["minutes"] == 1
        assert line["api_read_mb_per_minute"] > 0
        for name, figures in line["by_function"].items():
            assert figures["longest_lambda_wall_s"] >= figures["longest_wall_s"], name


def test_lambda_wall_time_stretches_only_the_cpu_seconds_to_the_vcpu_share() -> None:
    from bench.scale import lambda_vcpu, lambda_wall_s, targets

    assert lambda_vcpu(1769) == 1.0 and lambda_vcpu(10240) == 1.0  # one thread uses one vCPU at most
    assert lambda_wall_s(10.0, 12.0, 1769) == 12.0
    assert lambda_wall_s(10.0, 12.0, 1024) == round(2.0 + 10.0 * 1769 / 1024, 3)  # 19.275: 0.58 of a vCPU
    assert lambda_wall_s(5.0, 4.0, 512) == round(5.0 * 1769 / 512, 3)  # CPU beyond the wall (threads) waits nothing
    assert targets(600.0, 40.0, 1024, 120) == {"memory_mb_max": 512.0, "lambda_wall_s_max": 40.0, "memory": False, "time": True, "met": False}
    assert targets(None, None, 1024, 120)["met"] is False
