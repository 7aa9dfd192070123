"""joiner.services.nomination on the fakes: which pods are nominated where, and what a failing
API server or a missing RBAC grant costs (one error, the rest next round)."""

from __future__ import annotations

import dataclasses

from joiner.domain import labels as wk
from joiner.domain.model import Node, Pod, Taint
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, ClaimState, KubernetesError
from joiner.services.nomination import nominate_for_registering_nodes
from tests.support.fakes import EPOCH, FakeWorld, fake_world, pod_json

NOT_READY = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")


def _claim(claim_id: str, node: str, pods: list[str], state: str = ClaimState.REGISTERED) -> ClaimRecord:
    return ClaimRecord(claim_id, "default", state, EPOCH, instance_id=f"i-{claim_id}", node_name=node, pods=tuple(pods))


def _node(name: str, **fields: object) -> Node:
    values: dict[str, object] = {"ready": False, "taints": (NOT_READY,), "allocatable": Resources({"cpu": 4000}), "labels": {wk.NODEPOOL: "default"}}
    values.update(fields)
    return Node(name=name, **values)  # type: ignore[arg-type]


def _pods(world: FakeWorld, names: list[str]) -> list[Pod]:
    from joiner.domain.snapshot import parse_pod

    for name in names:
        world.kube.add("pods", pod_json(name))
    return [parse_pod(world.kube.get("pods", "default", name) or {}) for name in names]


def test_only_a_registered_uninitialized_claims_unbound_pods_are_nominated_to_its_node() -> None:
    world = fake_world()
    pods = _pods(world, ["a", "b", "c", "d", "e", "f"])
    claims = [
        _claim("c1", "joining", ["default/a", "default/b"]),
        _claim("c2", "ready", ["default/c"]),  # Ready: kube-scheduler binds now
        _claim("c3", "cordoned", ["default/d"]),  # being disrupted: no more pods
        _claim("c4", "joining", ["default/e"], state=ClaimState.LAUNCHED),  # not registered yet
        _claim("c5", "disrupted", ["default/f"]),
    ]  # its drain has begun
    nodes = [
        _node("joining"),
        _node("ready", ready=True, taints=()),
        _node("cordoned", unschedulable=True),
        _node("disrupted", taints=(NOT_READY, Taint(wk.DISRUPTED_TAINT_KEY, "", "NoSchedule"))),
    ]
    result = nominate_for_registering_nodes(world.runtime(), claims, nodes, pods, {})
    assert dict(result.nominated) == {"default/a": "joining", "default/b": "joining"} and result.errors == ()
    assert world.kube.nominations == [("default/a", "joining"), ("default/b", "joining")]
    assert world.metrics.total("PodsNominated") == 2


def test_the_first_failed_write_ends_the_pass_with_one_error() -> None:
    world = fake_world()
    pods = _pods(world, [f"p{i}" for i in range(5)])
    world.kube.fail("nominate_pod", KubernetesError("HTTP 403: pods/status is forbidden", status=403), times=5)
    result = nominate_for_registering_nodes(world.runtime(), [_claim("c1", "joining", [p.key for p in pods])], [_node("joining")], pods, {})
    assert result.nominated == {} and len(result.errors) == 1 and "403" in result.errors[0]
    assert world.kube.calls.count("nominate_pod") == 1


def test_the_limit_counts_attempts_not_successes() -> None:
    world = fake_world()
    pods = _pods(world, [f"p{i}" for i in range(6)])
    for pod in pods[:3]:  # re-created under their names since the round read them: refused
        world.kube.remove("pods", "default", pod.name)
        world.kube.add("pods", pod_json(pod.name))
    result = nominate_for_registering_nodes(world.runtime(), [_claim("c1", "joining", [p.key for p in pods])], [_node("joining")], pods, {}, limit=4)
    assert world.kube.calls.count("nominate_pod") == 4
    assert dict(result.nominated) == {"default/p3": "joining"}


def test_pods_nominated_anywhere_or_gone_are_left_alone() -> None:
    world = fake_world()
    pods = _pods(world, ["a", "b"])
    preempting = dataclasses.replace(pods[0], nominated_node="other")
    result = nominate_for_registering_nodes(
        world.runtime(), [_claim("c1", "joining", ["default/a", "default/b", "default/gone"])], [_node("joining")], [preempting, pods[1]], {}
    )
    assert dict(result.nominated) == {"default/b": "joining"}


def test_pods_of_another_scheduler_are_never_nominated() -> None:
    """Only kube-scheduler reads a nomination: another scheduler's pod would keep it (nobody
    clears it) and be held back for as long as that Node lives."""
    world = fake_world()
    world.kube.add("pods", pod_json("custom", extra_spec={"schedulerName": "my-scheduler"}))
    world.kube.add("pods", pod_json("named-default", extra_spec={"schedulerName": "default-scheduler"}))
    pods = _pods(world, ["plain"])
    from joiner.domain.snapshot import parse_pod

    pods += [parse_pod(world.kube.get("pods", "default", name) or {}) for name in ("custom", "named-default")]
    claim = _claim("c1", "joining", ["default/custom", "default/named-default", "default/plain"])
    result = nominate_for_registering_nodes(world.runtime(), [claim], [_node("joining")], pods, {})
    assert dict(result.nominated) == {"default/named-default": "joining", "default/plain": "joining"}
    assert world.kube.nominations == [("default/named-default", "joining"), ("default/plain", "joining")]


def test_an_earlier_nomination_of_another_schedulers_pod_does_not_hold_it_out_of_planning() -> None:
    """A pod of another scheduler that Joiner once nominated to the Node launched for it is
    planned as if not nominated (its scheduler does not read the nomination); one its own
    scheduler nominated elsewhere (preempting) still waits."""
    from joiner.services.provisioning import provision
    from tests.support.fakes import node_class_json, node_json, node_pool_json

    world = fake_world()
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add("node_pools", node_pool_json())
    other = {"schedulerName": "my-scheduler"}
    world.kube.add("pods", pod_json("custom", cpu="1", memory="256Mi", extra_spec=other))
    world.kube.add("pods", pod_json("preempting", cpu="1", memory="256Mi", extra_spec=other))
    world.kube.add("pods", pod_json("web", cpu="1", memory="256Mi"))
    (launched,) = provision(world.runtime("invocation-1"), world.clock.now()).launched
    assert sorted(launched.pods) == ["default/custom", "default/preempting", "default/web"]  # planned like any pending pod
    world.kube.add(
        "nodes",
        node_json(
            "registering",
            instance_id=launched.instance_id,
            zone=launched.zone,
            instance_type="c5.xlarge",
            cpu="3",
            memory="8Gi",
            ready=False,
            labels={wk.NODEPOOL: "default"},
            taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
        ),
    )
    world.kube.add("nodes", node_json("elsewhere", instance_id="i-0elsewhere", cpu="4", memory="8Gi", labels={wk.NODEPOOL: "default"}))
    for name, node in (("custom", "registering"), ("preempting", "elsewhere")):  # written before this round
        pod = world.kube.get("pods", "default", name)
        pod["status"]["nominatedNodeName"] = node
        world.kube.add("pods", pod)
    world.clock.advance(20)
    second = provision(world.runtime("invocation-2"), world.clock.now())
    assert dict(second.nominated) == {"default/web": "registering"}
    assert second.pending_pods == 1 and not second.launched  # custom: planned again, onto the registering Node's room
