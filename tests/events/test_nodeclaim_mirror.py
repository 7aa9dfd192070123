"""NodeClaim mirrors (issue 16 section 1) end to end: claims in DynamoDB on moto, mirrors
written over HTTP to the Kubernetes emulator, which admits them through the NodeClaim CRD's
schema as an API server would."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from joiner.domain.nodeclaims import MirrorCondition, mirror_name
from joiner.ports import ClaimRecord
from joiner.services.nodeclaims import sync_node_claims
from tests.events.world import T0, World

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def mirrors(world: World) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in world.emulator.list("NodeClaim")}


def conditions(mirror: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in mirror["status"]["conditions"]}


def test_every_open_claim_is_mirrored_with_karpenters_columns_and_an_owner(world: World) -> None:
    instance = world.launch_node("n1")
    world.runtime.state.put_claim(ClaimRecord("default-inflight", "default", "reserved", T0, pods=("default/web-9",)))
    result = sync_node_claims(world.runtime)
    assert (result.created, result.errors) == (2, 0)
    found = mirrors(world)
    assert sorted(found) == ["default-inflight", "default-n1"]
    ready = found["default-n1"]
    assert ready["status"]["instanceType"] == "c5.xlarge" and ready["status"]["capacityType"] == "spot"
    assert ready["status"]["zone"] == "us-east-1a" and ready["status"]["nodeName"] == "n1"
    assert ready["status"]["instanceID"] == instance and ready["status"]["providerID"] == f"aws:///us-east-1a/{instance}"
    assert conditions(ready) == {"Launched": "True", "Registered": "True", "Initialized": "True", "Ready": "True", "Disrupting": "False"}
    pool = world.emulator.get("NodePool", "default")
    assert ready["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
    assert ready["spec"] == {"nodePool": "default", "nodeClass": "default", "pods": []}
    inflight = found["default-inflight"]
    assert conditions(inflight)["Launched"] == "Unknown" and conditions(inflight)["Ready"] == "Unknown"
    assert inflight["spec"]["pods"] == ["default/web-9"] and "instanceID" not in inflight["status"]


def test_mirrors_follow_the_claim_and_go_with_it(world: World) -> None:
    world.runtime.state.put_claim(ClaimRecord("default-c1", "default", "reserved", T0, pods=("default/a",)))
    sync_node_claims(world.runtime)
    world.runtime.state.update_claim(
        "default-c1",
        state="launched",
        instance_id="i-0123456789abcdef0",
        instance_type="m5.large",
        zone="us-east-1b",
        capacity_type="on-demand",
        price=0.096,
        launched_at=T0 + timedelta(seconds=2),
    )
    assert sync_node_claims(world.runtime).updated == 1
    mirror = mirrors(world)["default-c1"]
    assert mirror["status"]["state"] == "launched" and mirror["status"]["price"] == "0.0960"
    assert conditions(mirror)["Launched"] == "True" and conditions(mirror)["Registered"] == "Unknown"
    assert sync_node_claims(world.runtime).updated == 0  # nothing changed: nothing written
    world.runtime.state.update_claim("default-c1", state="terminating", reason="spot-interruption")
    sync_node_claims(world.runtime)
    assert conditions(mirrors(world)["default-c1"])["Disrupting"] == "True"
    world.runtime.state.update_claim("default-c1", state="closed")
    assert sync_node_claims(world.runtime).deleted == 1
    assert mirrors(world) == {}


def test_disruption_findings_survive_a_later_scanner_sync(world: World) -> None:
    world.launch_node("n1")
    sync_node_claims(world.runtime, findings={"default-n1": [MirrorCondition("Drifted", "True", "Drifted", "AMI changed", T0)]})
    assert conditions(mirrors(world)["default-n1"])["Drifted"] == "True"
    sync_node_claims(world.runtime)  # the scanner knows nothing of drift: it keeps the finding
    mirror = mirrors(world)["default-n1"]
    assert conditions(mirror)["Drifted"] == "True"
    assert next(c for c in mirror["status"]["conditions"] if c["type"] == "Drifted")["message"] == "AMI changed"


def test_a_failing_api_server_never_fails_the_caller_and_the_next_sync_repairs(world: World) -> None:
    world.launch_node("n1")
    world.emulator.fail_next("POST", r"/apis/joiner.dev/v1/nodeclaims$", status=500, times=8)
    result = sync_node_claims(world.runtime)
    assert result.errors == 1 and result.created == 0
    assert world.metrics.total("NodeClaimMirrorErrors", operation="write") == 1
    world.emulator.clear_faults()
    assert sync_node_claims(world.runtime).created == 1
    assert list(mirrors(world)) == ["default-n1"]


def test_a_mirror_the_schema_rejects_is_refused_by_the_api_server(world: World) -> None:
    """The emulator admits NodeClaims through the CRD schema: a state outside the enum is a 422."""
    from joiner.ports import KubernetesError

    world.launch_node("n1")
    sync_node_claims(world.runtime)
    with pytest.raises(KubernetesError) as refused:
        world.kube.patch_node_claim("default-n1", {"status": {"state": "exploded"}}, status=True)
    assert refused.value.status == 422


def test_claim_ids_that_are_not_object_names_get_a_stable_distinct_name() -> None:
    assert mirror_name("default-abc123") == "default-abc123"
    odd = mirror_name("Pool_A-x")
    assert odd != mirror_name("pool-a-x") and odd.startswith("pool-a-x-") and odd == mirror_name("Pool_A-x")


def test_the_scanner_round_mirrors_what_it_launched(world: World) -> None:
    """A scanner round that launches for a pending pod leaves its claim mirrored."""
    from joiner.services.provisioning import run_scanner

    world.emulator.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }
    )
    summary = run_scanner(world.runtime, "economy")
    assert summary.rounds == 1
    launched = [c for c in world.runtime.state.open_claims() if c.state == "launched"]
    assert launched
    found = mirrors(world)
    for claim in launched:
        mirror = found[mirror_name(claim.claim_id)]
        assert mirror["status"]["instanceID"] == claim.instance_id and mirror["spec"]["pods"] == ["default/big"]


def test_a_slow_api_server_bounds_a_sync_in_time_and_the_next_one_finishes(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every create answers 0.3 s late: a sync stops writing once its time budget is spent (the
    scanner's next round waits for it), and later syncs create the rest."""
    import time

    from joiner.services import nodeclaims

    monkeypatch.setattr(nodeclaims, "MAX_SYNC_SECONDS", 0.5)
    for index in range(6):
        world.runtime.state.put_claim(ClaimRecord(f"default-c{index}", "default", "reserved", T0 + timedelta(seconds=index)))
    world.emulator.delay_next("POST", r"/apis/joiner.dev/v1/nodeclaims$", 0.3, times=6)
    started = time.monotonic()
    first = sync_node_claims(world.runtime)
    assert time.monotonic() - started < 1.5 and 0 < first.created < 6
    while len(mirrors(world)) < 6:
        assert sync_node_claims(world.runtime).created > 0
    assert sorted(mirrors(world)) == [f"default-c{index}" for index in range(6)]


# ---------------------------------------------------------------- written when the claim changes


def condition(mirror: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in mirror["status"]["conditions"] if c["type"] == kind)


def claim_events(world: World, uid: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events on the NodeClaim of ``uid``, as ``kubectl describe`` finds them."""
    found = [e for e in world.emulator.list("Event") if e["involvedObject"].get("kind") == "NodeClaim" and e["involvedObject"].get("uid") == uid]
    return [(e["reason"], e["message"]) for e in sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))]


def stamp(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_a_spot_warning_shows_on_the_nodeclaims_when_its_handler_returns(world: World) -> None:
    """No sync runs between the warning and the look: the interruption handler itself leaves the
    old claim Disrupting (with why and since when) and the replacement's NodeClaim launched, and
    each step is an Event on the NodeClaim, up to the old one's Terminated."""
    from joiner.services.provisioning import run_scanner

    instance = world.launch_node("n1")
    world.add_pod("n1-web-1", "n1")
    world.add_pod("n1-web-2", "n1")
    sync_node_claims(world.runtime)  # what the last scanner round left
    before = mirrors(world)["default-n1"]
    world.advance(30)
    warned_at = world.clock.now()
    world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert response == {"batchItemFailures": []} and len(messages) == 1

    found = mirrors(world)
    old = found["default-n1"]
    disrupting = condition(old, "Disrupting")
    assert (disrupting["status"], disrupting["reason"]) == ("True", "SpotInterruption")
    assert disrupting["message"].startswith("spot interruption; drain deadline ")
    assert disrupting["lastTransitionTime"] == stamp(warned_at)
    assert old["status"]["state"] == "terminating"
    for kind in ("Launched", "Registered", "Ready"):  # unchanged: their transition times stay
        assert condition(old, kind)["lastTransitionTime"] == condition(before, kind)["lastTransitionTime"]
    replacements = [c for c in world.runtime.state.open_claims() if c.claim_id != "default-n1"]
    assert len(replacements) == 1
    replacement = found[mirror_name(replacements[0].claim_id)]
    assert replacement["status"]["instanceID"] == replacements[0].instance_id
    assert conditions(replacement)["Launched"] == "True" and conditions(replacement)["Ready"] == "Unknown"
    assert condition(replacement, "Launched")["lastTransitionTime"] == stamp(warned_at)
    assert [reason for reason, _ in claim_events(world, old["metadata"]["uid"])] == ["Disrupting"]
    assert claim_events(world, old["metadata"]["uid"])[0][1].startswith("Disrupting NodeClaim: SpotInterruption (spot interruption; drain deadline")
    launched_events = claim_events(world, replacement["metadata"]["uid"])
    assert [reason for reason, _ in launched_events] == ["Launched"]
    assert replacements[0].instance_id in launched_events[0][1] and replacements[0].instance_type in launched_events[0][1]

    # the replacement's kubelet joins; the scanner's registration says so at once
    world.ready_replacements()
    world.advance(5)
    run_scanner(world.runtime, "economy")
    assert [r for r, _ in claim_events(world, replacement["metadata"]["uid"])] == ["Launched", "Registered", "Initialized"]
    assert conditions(mirrors(world)[replacement["metadata"]["name"]])["Ready"] == "True"

    # the drain ends: the old claim closes, its NodeClaim says Terminated and goes
    world.run_work_queue()
    assert world.runtime.state.get_claim("default-n1").state == "closed"
    assert "default-n1" not in mirrors(world)
    story = claim_events(world, old["metadata"]["uid"])
    assert [reason for reason, _ in story] == ["Disrupting", "Terminated"]
    assert story[1][1].startswith(f"instance {instance} terminated; spot-interruption")


def test_a_mirror_written_on_change_survives_a_failing_api_server_and_the_sync_repairs_it(world: World) -> None:
    """mirror_claim never raises into its caller: the error is counted, the sync writes it later."""
    from joiner.services.nodeclaims import mirror_claim

    world.runtime.state.put_claim(ClaimRecord("default-c1", "default", "reserved", T0))
    world.emulator.fail_next("POST", r"/apis/joiner.dev/v1/nodeclaims$", status=500, times=8)
    assert mirror_claim(world.runtime, "default-c1") is False
    assert world.metrics.total("NodeClaimMirrorErrors", operation="mirror") == 1
    world.emulator.clear_faults()
    assert mirror_claim(world.runtime, "no-such-claim") is False and mirror_claim(world.runtime, None) is False
    assert sync_node_claims(world.runtime).created == 1


def test_a_disruption_names_its_method_and_why_and_keeps_the_first_transition_time(world: World) -> None:
    from joiner.domain.nodeclaims import disrupting_condition
    from joiner.services.nodeclaims import mirror_claim

    world.launch_node("n1")
    claim = world.runtime.state.get_claim("default-n1")
    assert claim is not None and mirror_claim(world.runtime, claim)
    uid = mirrors(world)["default-n1"]["metadata"]["uid"]
    world.advance(10)
    marked = world.runtime.state.update_claim("default-n1", state="terminating", reason="disruption/drift")
    mirror_claim(world.runtime, marked)
    first = condition(mirrors(world)["default-n1"], "Disrupting")
    assert (first["reason"], first["lastTransitionTime"]) == ("Drifted", stamp(T0 + timedelta(seconds=10)))
    world.advance(10)
    mirror_claim(world.runtime, marked, condition=disrupting_condition("disruption/drift", "drifted: NodeClass AMI changed"))
    again = condition(mirrors(world)["default-n1"], "Disrupting")
    assert (again["reason"], again["message"], again["lastTransitionTime"]) == ("Drifted", "drifted: NodeClass AMI changed", first["lastTransitionTime"])
    assert [r for r, _ in claim_events(world, uid)] == ["Launched", "Registered", "Initialized", "Disrupting"]
    sync_node_claims(world.runtime)  # the scanner's sync keeps the disruption's why
    assert condition(mirrors(world)["default-n1"], "Disrupting")["message"] == "drifted: NodeClass AMI changed"
