"""PodSpecMemo: parsing a list of pods with the memo gives exactly what parsing each alone
gives, whatever differs between the pods of one workload."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.resources import Resources
from joiner.domain.snapshot import PodSpecMemo, parse_pod


def pod(
    index: int,
    *,
    owner: int,
    namespace: int,
    node: int | None,
    cpu: str,
    host_port: int | None,
    team: str | None,
    grace: int,
    init_restart: bool,
    mount: str,
    tolerate: bool,
    runtime_class: bool,
) -> dict[str, Any]:
    labels = {"app": f"app-{owner}", "pod-template-hash": "abc"}
    if team is not None:
        labels["team"] = team
    container: dict[str, Any] = {
        "name": "main",
        "image": "x",
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
        "volumeMounts": [{"name": f"kube-api-access-{mount}", "mountPath": "/var/run/secrets"}],
    }
    if host_port is not None:
        container["ports"] = [{"containerPort": 8080, "hostPort": host_port}]
    spec: dict[str, Any] = {
        "containers": [container],
        "initContainers": [{"name": "init", "image": "x", "resources": {"requests": {"cpu": "50m"}}, **({"restartPolicy": "Always"} if init_restart else {})}],
        "volumes": [
            {"name": f"kube-api-access-{mount}", "projected": {"sources": []}},
            {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{index}"}},
        ],
        "terminationGracePeriodSeconds": grace,
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {"matchLabels": {"app": f"app-{owner}"}}, "matchLabelKeys": ["team"]}
        ],
        "tolerations": [{"key": "gpu", "operator": "Exists"}] if tolerate else [],
    }
    if runtime_class:
        spec["runtimeClassName"] = "kata"
    if node is not None:
        spec["nodeName"] = f"node-{node}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{index}",
            "namespace": f"ns-{namespace}",
            "uid": f"u-{index}",
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet" if owner < 2 else "DaemonSet", "name": f"rs-{owner}", "uid": f"o-{owner}", "controller": True}
            ],
        },
        "spec": spec,
        "status": {"phase": "Running" if node is not None else "Pending"},
    }


variants = st.fixed_dictionaries(
    {
        "owner": st.integers(0, 2),
        "namespace": st.integers(0, 1),
        "node": st.none() | st.integers(0, 3),
        "cpu": st.sampled_from(["100m", "250m", "1"]),
        "host_port": st.none() | st.sampled_from([0, 80, 443]),
        "team": st.none() | st.sampled_from(["a", "b"]),
        "grace": st.sampled_from([0, 30, 2**63 - 1]),
        "init_restart": st.booleans(),
        "mount": st.sampled_from(["aaaaa", "bbbbb"]),
        "tolerate": st.booleans(),
        "runtime_class": st.booleans(),
    }
)
FIELDS = ("owner", "namespace", "node", "cpu", "host_port", "team", "grace", "init_restart", "mount", "tolerate", "runtime_class")


@settings(max_examples=300, deadline=None)
@given(variants, st.lists(st.tuples(variants, st.sets(st.sampled_from(sorted(FIELDS)), max_size=2)), max_size=25), st.integers(1, 4), st.booleans())
def test_a_memo_never_changes_what_a_pod_parses_to(
    first: dict[str, Any], steps: list[tuple[dict[str, Any], set[str]]], capacity: int, switch_runtime_classes: bool
) -> None:
    """Each pod is the one before with one or two fields drawn anew, as the pods of one
    workload differ from each other."""
    memo = PodSpecMemo(capacity)
    runtime_classes = {"kata": Resources({"cpu": 250})}
    current = first
    for index, (drawn, changed) in enumerate([(first, set(FIELDS)), *steps]):
        current = {**current, **{name: drawn[name] for name in changed}}
        obj = pod(index, **current)
        if switch_runtime_classes and index == len(steps) // 2:
            runtime_classes = {"kata": Resources({"cpu": 500})}
        assert parse_pod(obj, runtime_classes, memo=memo) == parse_pod(obj, runtime_classes)


def test_pods_of_one_workload_share_their_parsed_parts() -> None:
    memo = PodSpecMemo()
    first, second = (
        parse_pod(
            pod(i, owner=0, namespace=0, node=i, cpu="1", host_port=None, team=None, grace=30, init_restart=False, mount=m, tolerate=True, runtime_class=False),
            memo=memo,
        )
        for i, m in ((1, "aaaaa"), (2, "bbbbb"))
    )
    assert first.tolerations is second.tolerations and first.topology_spread is second.topology_spread
    assert first.volume_claims != second.volume_claims and first.node_name != second.node_name
