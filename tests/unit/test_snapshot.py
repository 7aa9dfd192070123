"""Kubernetes objects -> domain model (joiner.domain.snapshot)."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.domain.model import Budget, LabelSelector, SelectorTerm, Taint, Toleration
from joiner.domain.resources import Resources
from joiner.domain.snapshot import (
    DAEMONSET_DEFAULT_TOLERATIONS,
    MATCH_NOTHING,
    Snapshot,
    SnapshotError,
    load_snapshot_yaml,
    parse_daemonset,
    parse_node,
    parse_node_class,
    parse_node_pool,
    parse_objects,
    parse_pdb,
    parse_pod,
)

MI = 2**20 * 1000  # one Mi in milli-units
GI = 2**30 * 1000
POD_SLOT = {"pods": 1000}


def container(name: str = "app", requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def pod_object(
    name: str = "web-1",
    namespace: str | None = "default",
    *,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    spec.setdefault("containers", [container(requests={"cpu": "100m"})])
    meta: dict[str, Any] = {"name": name, **(metadata or {})}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = labels
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def error_of(call: Any, *args: Any, **kwargs: Any) -> SnapshotError:
    with pytest.raises(SnapshotError) as raised:
        call(*args, **kwargs)
    return raised.value


# ---------------------------------------------------------------- effective requests


class TestEffectiveRequests:
    def test_app_containers_sum_plus_one_pod_slot(self) -> None:
        pod = parse_pod(pod_object(containers=[container("a", {"cpu": "500m", "memory": "512Mi"}), container("b", {"cpu": "250m"})]))
        assert pod.requests == Resources({"cpu": 750, "memory": 512 * MI, **POD_SLOT})

    def test_limits_default_requests_per_resource(self) -> None:
        pod = parse_pod(pod_object(containers=[container(requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})]))
        # cpu has a request (kept), memory and the GPU only limits (used as requests).
        assert pod.requests == Resources({"cpu": 100, "memory": GI, "nvidia.com/gpu": 1000, **POD_SLOT})

    def test_an_explicit_zero_request_is_not_replaced_by_the_limit(self) -> None:
        pod = parse_pod(pod_object(containers=[container(requests={"cpu": "0"}, limits={"cpu": "2"})]))
        assert pod.requests["cpu"] == 0

    def test_init_containers_and_sidecars_worked_example(self) -> None:
        # app:      a 500m/512Mi, b 250m + memory limit 256Mi        -> 750m / 768Mi
        # sidecars: side-1 100m/64Mi, side-2 200m/32Mi              -> 300m / 96Mi
        # sum (app + sidecars)                                      -> 1050m / 864Mi
        # init steps: init-a 2000m/100Mi (no sidecar before it)
        #             init-b 1500m/1Gi + side-1 (declared before)   -> 1600m / 1088Mi
        # effective = max per resource                              -> 2000m / 1088Mi
        # + RuntimeClass kata overhead 250m/160Mi, + 1 pod          -> 2250m / 1248Mi
        spec: dict[str, Any] = {
            "runtimeClassName": "kata",
            "containers": [container("a", {"cpu": "500m", "memory": "512Mi"}), container("b", {"cpu": "250m"}, {"memory": "256Mi"})],
            "initContainers": [
                container("init-a", {"cpu": "2", "memory": "100Mi"}),
                container("side-1", {"cpu": "100m", "memory": "64Mi"}, restartPolicy="Always"),
                container("init-b", {"cpu": "1500m", "memory": "1Gi"}),
                container("side-2", {"cpu": "200m", "memory": "32Mi"}, restartPolicy="Always"),
            ],
        }
        runtime_classes = {"kata": Resources({"cpu": 250, "memory": 160 * MI})}
        pod = parse_pod(pod_object(**spec), runtime_classes)
        assert pod.requests == Resources({"cpu": 2250, "memory": 1248 * MI, **POD_SLOT})

        # Declared after init-b, side-1 no longer runs alongside it: init-b's step is 1500m/1024Mi,
        # so memory becomes max(864Mi, 1024Mi) = 1024Mi (+160Mi overhead).
        spec["initContainers"] = [spec["initContainers"][i] for i in (0, 2, 1, 3)]
        pod = parse_pod(pod_object(**spec), runtime_classes)
        assert pod.requests == Resources({"cpu": 2250, "memory": 1184 * MI, **POD_SLOT})

    def test_sidecars_alone_add_to_the_app_sum(self) -> None:
        pod = parse_pod(
            pod_object(
                containers=[container(requests={"cpu": "1"})],
                initContainers=[container("proxy", {"cpu": "500m"}, restartPolicy="Always"), container("init", {"cpu": "1200m"})],
            )
        )
        # sum 1500m; init step 1200m + 500m sidecar = 1700m wins.
        assert pod.requests["cpu"] == 1700

    def test_spec_overhead_wins_over_the_runtime_class_lookup(self) -> None:
        obj = pod_object(runtimeClassName="kata", overhead={"cpu": "50m"})
        pod = parse_pod(obj, {"kata": Resources({"cpu": 999})})
        assert pod.requests["cpu"] == 150

    def test_unknown_runtime_class_adds_nothing(self) -> None:
        assert parse_pod(pod_object(runtimeClassName="gvisor"), {}).requests["cpu"] == 100

    def test_pod_level_resources_replace_the_aggregate_for_cpu_and_memory(self) -> None:
        pod = parse_pod(
            pod_object(
                resources={"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}},
                containers=[container(requests={"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"})],
            )
        )
        assert pod.requests == Resources({"cpu": 2000, "memory": GI, "nvidia.com/gpu": 1000, **POD_SLOT})

    def test_extended_resources_pass_through(self) -> None:
        pod = parse_pod(pod_object(containers=[container(limits={"aws.amazon.com/neuron": "2", "vpc.amazonaws.com/efa": 1})]))
        assert pod.requests == Resources({"aws.amazon.com/neuron": 2000, "vpc.amazonaws.com/efa": 1000, **POD_SLOT})


# ---------------------------------------------------------------- pod constraints and status


class TestPodConstraints:
    def test_node_selector_keys_are_normalised(self) -> None:
        pod = parse_pod(pod_object(nodeSelector={"karpenter.sh/capacity-type": "spot", "team": "a"}))
        assert pod.node_selector[wk.CAPACITY_TYPE].single_value() == "spot"
        assert pod.node_selector["team"].single_value() == "a"

    def test_required_node_affinity_terms_are_ored(self) -> None:
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}]},
                        {
                            "matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
                            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}],
                        },
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 30, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}}
                ],
            }
        }
        pod = parse_pod(pod_object(affinity=affinity))
        first, second = pod.required_node_affinity
        assert first[wk.INSTANCE_CATEGORY].values == frozenset({"c", "m"})
        assert second[wk.ARCH].single_value() == "arm64"
        assert second[wk.HOSTNAME].single_value() == "node-a"
        (preferred,) = pod.preferred_node_affinity
        assert preferred.weight == 30 and preferred.requirements[wk.ZONE].single_value() == "us-east-1a"

    def test_empty_node_selector_terms_match_nothing(self) -> None:
        terms = [{}, {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]
        pod = parse_pod(pod_object(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}))
        assert len(pod.required_node_affinity) == 1  # the empty term can never match, the other still can
        error = error_of(parse_pod, pod_object(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}))
        assert error.field == "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        assert "can never schedule" in str(error)

    def test_tolerations(self) -> None:
        pod = parse_pod(
            pod_object(
                tolerations=[
                    {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "a", "value": "b", "tolerationSeconds": 30},
                    {"operator": "Exists"},
                ]
            )
        )
        assert pod.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"), Toleration("a", "Equal", "b", "", 30), Toleration("", "Exists"))

    def test_pod_affinity_and_anti_affinity_with_match_label_keys(self) -> None:
        affinity = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "matchLabelKeys": ["pod-template-hash", "not-on-pod"],
                        "mismatchLabelKeys": ["tenant"],
                    }
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {}, "namespaces": ["a", "b"]}}
                ],
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "topology.kubernetes.io/zone",
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
                        "namespaceSelector": {},
                    }
                ]
            },
        }
        pod = parse_pod(pod_object(labels={"app": "web", "pod-template-hash": "abc", "tenant": "t1"}, affinity=affinity))
        required, preferred = pod.pod_anti_affinity
        assert required.weight is None and required.topology_key == wk.HOSTNAME
        assert required.label_selector == LabelSelector(
            match_labels=(("app", "web"),), match_expressions=(("pod-template-hash", "In", ("abc",)), ("tenant", "NotIn", ("t1",)))
        )
        assert required.match_label_keys == ("pod-template-hash", "not-on-pod")
        assert required.namespaces == frozenset() and required.namespace_selector is None  # own namespace
        assert preferred.weight == 50 and preferred.namespaces == frozenset({"a", "b"})
        assert preferred.label_selector == LabelSelector()
        (affine,) = pod.pod_affinity
        assert affine.label_selector == LabelSelector(match_expressions=(("app", "In", ("db",)),))
        assert affine.namespace_selector == LabelSelector()  # empty selector: all namespaces
        # The merged selector selects siblings of the same revision only.
        assert required.label_selector is not None
        assert required.label_selector.matches({"app": "web", "pod-template-hash": "abc", "tenant": "t2"})
        assert not required.label_selector.matches({"app": "web", "pod-template-hash": "old", "tenant": "t2"})
        assert not required.label_selector.matches({"app": "web", "pod-template-hash": "abc", "tenant": "t1"})

    def test_topology_spread(self) -> None:
        constraints = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "minDomains": 3,
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["pod-template-hash"],
                "nodeAffinityPolicy": "Ignore",
                "nodeTaintsPolicy": "Honor",
            },
            {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
        ]
        pod = parse_pod(pod_object(labels={"app": "web", "pod-template-hash": "abc"}, topologySpreadConstraints=constraints))
        zone, host = pod.topology_spread
        assert (zone.max_skew, zone.topology_key, zone.when_unsatisfiable, zone.min_domains) == (1, wk.ZONE, "DoNotSchedule", 3)
        assert zone.label_selector == LabelSelector(match_labels=(("app", "web"), ("pod-template-hash", "abc")))
        assert (zone.node_affinity_policy, zone.node_taints_policy) == ("Ignore", "Honor")
        assert (host.max_skew, host.when_unsatisfiable, host.label_selector, host.min_domains) == (2, "ScheduleAnyway", None, None)
        assert (host.node_affinity_policy, host.node_taints_policy) == ("Honor", "Ignore")

    def test_topology_spread_validation(self) -> None:
        bad = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}
        error = error_of(parse_pod, pod_object(topologySpreadConstraints=[bad]))
        assert str(error).startswith("Pod default/web-1: spec.topologySpreadConstraints[0].minDomains: only allowed")
        error = error_of(parse_pod, pod_object(topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "zone"}]))
        assert error.field == "spec.topologySpreadConstraints[0].maxSkew"

    def test_host_ports_from_containers_sidecars_and_host_network(self) -> None:
        pod = parse_pod(
            pod_object(
                hostNetwork=True,
                containers=[container(ports=[{"containerPort": 8080}, {"containerPort": 53, "hostPort": 1053, "protocol": "UDP", "hostIP": "10.0.0.1"}])],
                initContainers=[
                    container("proxy", restartPolicy="Always", ports=[{"containerPort": 15000, "hostPort": 15000}]),
                    container("setup", ports=[{"containerPort": 9999, "hostPort": 9999}]),  # finishes before the pod runs
                ],
            )
        )
        assert [(p.port, p.protocol, p.host_ip) for p in pod.host_ports] == [(1053, "UDP", "10.0.0.1"), (8080, "TCP", "0.0.0.0"), (15000, "TCP", "0.0.0.0")]
        assert parse_pod(pod_object(containers=[container(ports=[{"containerPort": 80}])])).host_ports == ()

    def test_status_owner_and_lifecycle_fields(self) -> None:
        obj = pod_object(
            metadata={
                "uid": "u-1",
                "creationTimestamp": "2024-05-01T12:00:00Z",
                "deletionTimestamp": "2024-05-01T12:30:00.5Z",
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"kind": "Workflow", "name": "w"}, {"kind": "ReplicaSet", "name": "web-abc", "controller": True}],
            },
            status={
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2024-05-01T12:01:00Z"}],
            },
            priority=1000,
            priorityClassName="high",
            terminationGracePeriodSeconds=120,
            schedulingGates=[{"name": "wait"}],
        )
        pod = parse_pod(obj)
        assert pod.uid == "u-1"
        assert pod.created == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
        assert pod.deleting
        assert pod.unschedulable_since == datetime(2024, 5, 1, 12, 1, tzinfo=UTC)
        assert (pod.owner_kind, pod.owner_name) == ("ReplicaSet", "web-abc")
        assert (pod.priority, pod.priority_class_name, pod.termination_grace_seconds) == (1000, "high", 120)
        assert pod.scheduling_gated and pod.do_not_disrupt and not pod.is_pending

    def test_defaults(self) -> None:
        pod = parse_pod(pod_object(namespace=None))
        assert pod.namespace == "default" and pod.phase == "Pending" and pod.termination_grace_seconds == 30
        assert pod.owner_kind is None and pod.node_name is None and pod.unschedulable_since is None and pod.created is None
        assert pod.is_pending

    def test_first_owner_when_none_is_marked_controller(self) -> None:
        pod = parse_pod(pod_object(metadata={"ownerReferences": [{"kind": "DaemonSet", "name": "fluent-bit"}]}))
        assert pod.is_daemonset_pod and not pod.is_pending


# ---------------------------------------------------------------- errors on pods


class TestPodErrors:
    def test_bad_quantity_names_object_and_field(self) -> None:
        error = error_of(parse_pod, pod_object(containers=[container(requests={"cpu": "abc"})]))
        assert str(error).startswith("Pod default/web-1: spec.containers[0].resources.requests.cpu: invalid quantity 'abc'")
        assert (error.object_ref, error.field) == ("Pod default/web-1", "spec.containers[0].resources.requests.cpu")
        assert isinstance(error, ValueError)

    @pytest.mark.parametrize("bad", ["1.2.3", "1Gb", "", None, True, float("nan"), "-1"])
    def test_every_malformed_quantity_is_a_snapshot_error(self, bad: object) -> None:
        obj = pod_object(namespace="shop", containers=[container(), container("second", limits={"memory": bad})])
        error = error_of(parse_pod, obj)
        assert error.object_ref == "Pod shop/web-1"
        assert error.field == "spec.containers[1].resources.limits.memory"

    def test_init_container_error_path(self) -> None:
        error = error_of(parse_pod, pod_object(initContainers=[container("i", {"memory": "lots"})]))
        assert error.field == "spec.initContainers[0].resources.requests.memory"

    @pytest.mark.parametrize(
        ("spec", "field", "problem"),
        [
            ({"containers": []}, "spec.containers", "at least one container"),
            ({"containers": "app"}, "spec.containers", "expected a list"),
            ({"containers": ["app"]}, "spec.containers[0]", "expected a mapping"),
            ({"nodeSelector": {"disk": True}}, "spec.nodeSelector.disk", "expected a string, got boolean true (quote it)"),
            ({"nodeSelector": {"count": 1}}, "spec.nodeSelector.count", "(quote it)"),
            ({"tolerations": [{"key": "a", "operator": "Matches"}]}, "spec.tolerations[0].operator", "'Matches' is not one of Equal, Exists"),
            ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].operator", "must be Exists when key is empty"),
            ({"tolerations": [{"key": "a", "effect": "NoWay"}]}, "spec.tolerations[0].effect", "'NoWay'"),
            ({"priority": "high"}, "spec.priority", "expected an integer"),
            ({"terminationGracePeriodSeconds": -1}, "spec.terminationGracePeriodSeconds", "at least 0"),
            ({"initContainers": [container("i", restartPolicy="OnFailure")]}, "spec.initContainers[0].restartPolicy", "not one of Always"),
            (
                {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Like", "values": ["x"]}]}]
                            }
                        }
                    }
                },
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
                "unknown operator 'Like'",
            ),
            (
                {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchFields": [{"key": "spec.providerID", "operator": "In", "values": ["x"]}]}]
                            }
                        }
                    }
                },
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key",
                "only metadata.name",
            ),
            (
                {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
                "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
                "required",
            ),
            (
                {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "podAffinityTerm": {"topologyKey": "z"}}]}}},
                "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
                "at most 100",
            ),
            (
                {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
                "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values",
                "needs at least one value",
            ),
            ({"containers": [container(ports=[{"containerPort": 80, "hostPort": 70000}])]}, "spec.containers[0].ports[0].hostPort", "at most 65535"),
        ],
    )
    def test_malformed_fields(self, spec: dict[str, Any], field: str, problem: str) -> None:
        error = error_of(parse_pod, pod_object(**spec))
        assert error.object_ref == "Pod default/web-1"
        assert error.field == field
        assert problem in error.problem

    def test_bad_timestamps_and_phase(self) -> None:
        error = error_of(parse_pod, pod_object(metadata={"creationTimestamp": "yesterday"}))
        assert error.field == "metadata.creationTimestamp" and "RFC 3339" in error.problem
        error = error_of(parse_pod, pod_object(status={"phase": "Sleeping"}))
        assert error.field == "status.phase"
        error = error_of(
            parse_pod, pod_object(status={"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": 5}]})
        )
        assert error.field == "status.conditions[0].lastTransitionTime"

    def test_missing_name_and_shape(self) -> None:
        error = error_of(parse_pod, {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [container()]}})
        assert str(error) == "Pod (unnamed): metadata.name: required"
        error = error_of(parse_pod, ["not", "a", "pod"])
        assert str(error) == "Pod: expected a mapping, got a list"
        error = error_of(parse_pod, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
        assert str(error) == "Pod default/p: spec: required"


# ---------------------------------------------------------------- nodes, DaemonSets, PDBs


def test_node() -> None:
    node = parse_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "ip-10-0-0-1.ec2.internal",
                "labels": {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "default", wk.CAPACITY_TYPE: "on-demand"},
                "annotations": {"a": "b"},
                "creationTimestamp": "2024-05-01T00:00:00Z",
                "deletionTimestamp": "2024-05-02T00:00:00Z",
            },
            "spec": {
                "providerID": "aws:///us-east-1a/i-0abc",
                "unschedulable": True,
                "taints": [{"key": "k", "value": "v", "effect": "NoExecute", "timeAdded": "2024-05-01T00:00:00Z"}],
            },
            "status": {
                "allocatable": {"cpu": "1930m", "memory": "3Gi", "pods": "29", "hugepages-2Mi": "0"},
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "29"},
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            },
        }
    )
    assert node.labels["karpenter.sh/capacity-type"] == "spot"
    assert node.labels[wk.CAPACITY_TYPE] == "on-demand"  # an existing Joiner key wins over the alias
    assert node.node_pool == "default"
    assert node.instance_id == "i-0abc"
    assert node.taints == (Taint("k", "v", "NoExecute"),)
    assert node.allocatable == Resources({"cpu": 1930, "memory": 3 * GI, "pods": 29000})
    assert node.capacity["cpu"] == 2000
    assert node.ready and node.unschedulable and node.deleting
    assert node.created == datetime(2024, 5, 1, tzinfo=UTC)
    not_ready = parse_node({"kind": "Node", "metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not not_ready.ready and not not_ready.deleting
    error = error_of(parse_node, {"kind": "Node", "metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert str(error).startswith("Node n: spec.taints[0].effect: 'Sometimes' is not one of NoSchedule")


def test_daemonset_template_becomes_a_daemonset_pod() -> None:
    daemonset = parse_daemonset(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "fluent-bit", "namespace": "logging"},
            "spec": {
                "selector": {"matchLabels": {"app": "fluent-bit"}},
                "template": {
                    "metadata": {"labels": {"app": "fluent-bit"}},
                    "spec": {
                        "hostNetwork": True,
                        "containers": [container(requests={"cpu": "100m", "memory": "128Mi"})],
                        "tolerations": [
                            {"key": "dedicated", "operator": "Exists"},
                            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                        ],
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                    },
                },
            },
        }
    )
    pod = daemonset.pod
    assert (daemonset.namespace, daemonset.name) == ("logging", "fluent-bit")
    assert pod.is_daemonset_pod and pod.owner_name == "fluent-bit" and not pod.is_pending
    assert pod.requests == Resources({"cpu": 100, "memory": 128 * MI, **POD_SLOT})
    assert pod.labels == {"app": "fluent-bit"}
    assert pod.node_selector[wk.OS].single_value() == "linux"
    # Its own tolerations first, then the controller's defaults (no duplicates), plus network-unavailable for hostNetwork.
    assert pod.tolerations[0] == Toleration("dedicated", "Exists")
    assert set(DAEMONSET_DEFAULT_TOLERATIONS) <= set(pod.tolerations)
    assert len(pod.tolerations) == len(set(pod.tolerations)) == 1 + len(DAEMONSET_DEFAULT_TOLERATIONS) + 1
    assert Toleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule") in pod.tolerations
    error = error_of(
        parse_daemonset,
        {"kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "x"}, "spec": {"template": {"spec": {"containers": [container(requests={"cpu": "x"})]}}}},
    )
    assert str(error).startswith("DaemonSet x/ds: spec.template.spec.containers[0].resources.requests.cpu: invalid quantity 'x'")


class TestPdb:
    def obj(self, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": spec,
            "status": status or {},
        }

    def test_fields(self) -> None:
        pdb = parse_pdb(self.obj({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}, {"disruptionsAllowed": 1}))
        assert (pdb.namespace, pdb.name, pdb.min_available, pdb.max_unavailable, pdb.disruptions_allowed) == ("shop", "web", "50%", None, 1)
        assert pdb.selector == LabelSelector(match_labels=(("app", "web"),))
        assert parse_pdb(self.obj({"maxUnavailable": 1, "selector": {}})).max_unavailable == "1"

    def test_null_selector_selects_nothing_and_empty_selects_everything(self) -> None:
        assert parse_pdb(self.obj({"maxUnavailable": 1})).selector == MATCH_NOTHING
        assert not MATCH_NOTHING.matches({}) and not MATCH_NOTHING.matches({"app": "web"})
        assert parse_pdb(self.obj({"maxUnavailable": 1, "selector": {}})).selector.matches({"anything": "x"})

    @pytest.mark.parametrize(
        ("spec", "field"),
        [
            ({"minAvailable": 1, "maxUnavailable": 1}, "spec"),
            ({"minAvailable": "150%"}, "spec.minAvailable"),
            ({"maxUnavailable": "half"}, "spec.maxUnavailable"),
            ({"maxUnavailable": "5"}, "spec.maxUnavailable"),
            ({"minAvailable": -1}, "spec.minAvailable"),
            ({"selector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}, "spec.selector.matchExpressions[0].operator"),
        ],
    )
    def test_errors(self, spec: dict[str, Any], field: str) -> None:
        error = error_of(parse_pdb, self.obj(spec))
        assert error.object_ref == "PodDisruptionBudget shop/web" and error.field == field


# ---------------------------------------------------------------- NodePools

BRIEF_NODE_POOL = """
apiVersion: joiner.dev/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata: {labels: {team: a}, annotations: {owner: platform}}
    spec:
      nodeClassRef: {group: joiner.dev, kind: NodeClass, name: general}
      requirements:
        - {key: joiner.dev/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, c5.2xlarge], minValues: 2}
      taints: [{key: k, value: v, effect: NoSchedule}]
      startupTaints: [{key: cni, effect: NoExecute}]
      expireAfter: 720h
      terminationGracePeriod: 48h
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 1m30s
    budgets:
      - {nodes: "10%"}
      - {nodes: "0", schedule: "0 9 * * mon-fri", duration: 8h, reasons: [Underutilized, Empty]}
    minSavings: {perHour: 0.05, percent: 15}
  interruption:
    rebalance: ignore
  limits: {cpu: "1000", memory: 1000Gi, nvidia.com/gpu: "0"}
  weight: 10
status: {nodes: 3}
"""


class TestNodePool:
    def test_every_field(self) -> None:
        (pool,) = load_snapshot_yaml(BRIEF_NODE_POOL).node_pools
        assert pool.name == "default" and pool.node_class == "general"
        assert pool.labels == {"team": "a"} and pool.annotations == {"owner": "platform"}
        assert pool.requirements[wk.CAPACITY_TYPE].values == frozenset({"spot", "on-demand"})
        assert pool.requirements[wk.INSTANCE_TYPE].min_values == 2
        assert pool.taints == (Taint("k", "v", "NoSchedule"),) and pool.startup_taints == (Taint("cni", "", "NoExecute"),)
        assert pool.expire_after == timedelta(hours=720) and pool.termination_grace_period == timedelta(hours=48)
        assert pool.disruption.consolidation_policy == "WhenEmpty"
        assert pool.disruption.consolidate_after == timedelta(seconds=90)
        assert pool.disruption.budgets == (Budget("10%"), Budget("0", "0 9 * * mon-fri", timedelta(hours=8), ("Empty", "Underutilized")))
        assert (pool.disruption.min_savings_per_hour, pool.disruption.min_savings_percent) == (0.05, 15.0)
        assert pool.rebalance == "ignore" and pool.weight == 10
        assert pool.limits is not None
        assert pool.limits["cpu"] == 1_000_000 and pool.limits["memory"] == 1000 * GI
        assert "nvidia.com/gpu" in pool.limits and pool.limits["nvidia.com/gpu"] == 0  # "no GPU nodes", not "unlimited"

    def test_defaults(self) -> None:
        pool = parse_node_pool({"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "p"}})
        assert pool.node_class == "default" and pool.weight == 0 and pool.limits is None
        assert pool.expire_after == timedelta(days=30) and pool.termination_grace_period is None
        assert pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
        assert pool.disruption.consolidate_after == timedelta(0)
        assert pool.disruption.budgets == (Budget("10%"),)
        assert (pool.disruption.min_savings_per_hour, pool.disruption.min_savings_percent) == (0.0, 10.0)
        assert pool.rebalance == "replace" and len(pool.requirements) == 0

    def test_never(self) -> None:
        pool = parse_node_pool(
            {
                "kind": "NodePool",
                "metadata": {"name": "p"},
                "spec": {"template": {"spec": {"expireAfter": "Never"}}, "disruption": {"consolidateAfter": "Never"}},
            }
        )
        assert pool.expire_after is None and pool.disruption.consolidate_after is None

    def test_karpenter_node_pool_translates(self) -> None:
        snapshot = load_snapshot_yaml(
            """
            apiVersion: karpenter.sh/v1
            kind: NodePool
            metadata: {name: general}
            spec:
              template:
                metadata: {labels: {workload: general}}
                spec:
                  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
                  requirements:
                    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
                    - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
                    - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
                  expireAfter: 336h
              disruption:
                consolidationPolicy: WhenEmptyOrUnderutilized
                consolidateAfter: 5m
                budgets: [{nodes: "20%", reasons: [Drifted]}]
              limits: {cpu: 100}
              weight: 50
            """
        )
        (pool,) = snapshot.node_pools
        assert pool.node_class == "default" and pool.weight == 50
        assert pool.requirements[wk.CAPACITY_TYPE].single_value() == "spot"
        assert pool.requirements[wk.INSTANCE_CATEGORY].values == frozenset({"c", "m", "r"})
        assert pool.requirements[wk.INSTANCE_GENERATION].has("3") and not pool.requirements[wk.INSTANCE_GENERATION].has("2")
        assert pool.expire_after == timedelta(hours=336) and pool.disruption.consolidate_after == timedelta(minutes=5)
        assert pool.disruption.budgets == (Budget("20%", reasons=("Drifted",)),)
        assert pool.limits == Resources({"cpu": 100_000})
        assert pool.rebalance == "replace"  # Joiner's default for what Karpenter has no field for

    @pytest.mark.parametrize(
        ("spec", "field", "problem"),
        [
            ({"weight": 0}, "spec.weight", "at least 1"),
            ({"weight": 101}, "spec.weight", "at most 100"),
            ({"weight": "high"}, "spec.weight", "expected an integer"),
            ({"disruption": {"budgets": [{"nodes": "110%"}]}}, "spec.disruption.budgets[0].nodes", "percentage from '0%' to '100%'"),
            ({"disruption": {"budgets": [{"nodes": "ten"}]}}, "spec.disruption.budgets[0].nodes", "'ten'"),
            (
                {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Bored"]}]}},
                "spec.disruption.budgets[0].reasons[0]",
                "'Bored' is not one of Drifted, Empty, Expired, Underutilized",
            ),
            ({"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}, "spec.disruption.budgets[0].duration", "required with a schedule"),
            ({"disruption": {"budgets": [{"nodes": "1", "duration": "1h"}]}}, "spec.disruption.budgets[0].schedule", "required when duration"),
            ({"disruption": {"budgets": [{"nodes": "1", "schedule": "9 * *", "duration": "1h"}]}}, "spec.disruption.budgets[0].schedule", "5-field cron"),
            ({"disruption": {"consolidationPolicy": "WhenUnderutilized"}}, "spec.disruption.consolidationPolicy", "'WhenUnderutilized' is not one of"),
            ({"disruption": {"consolidateAfter": "30d"}}, "spec.disruption.consolidateAfter", "no day unit"),
            ({"disruption": {"minSavings": {"perHour": -0.01}}}, "spec.disruption.minSavings.perHour", "at least 0"),
            ({"disruption": {"minSavings": {"percent": 120}}}, "spec.disruption.minSavings.percent", "between 0 and 100"),
            ({"disruption": {"minSavings": {"percent": "10%"}}}, "spec.disruption.minSavings.percent", "expected a number"),
            ({"interruption": {"rebalance": "sometimes"}}, "spec.interruption.rebalance", "'sometimes' is not one of replace, ignore"),
            ({"limits": {"cpu": "lots"}}, "spec.limits.cpu", "invalid quantity 'lots'"),
            ({"limits": {"memory": "-1Gi"}}, "spec.limits.memory", "must not be negative"),
            ({"template": {"spec": {"expireAfter": "forever"}}}, "spec.template.spec.expireAfter", "invalid duration 'forever'"),
            ({"template": {"spec": {"terminationGracePeriod": "Never"}}}, "spec.template.spec.terminationGracePeriod", "Never is not allowed"),
            (
                {"template": {"spec": {"requirements": [{"key": "a", "operator": "Like", "values": ["x"]}]}}},
                "spec.template.spec.requirements[0]",
                "unknown operator 'Like'",
            ),
            (
                {"template": {"spec": {"requirements": [{"key": "a", "operator": "In", "values": ["x"], "minValues": 2}]}}},
                "spec.template.spec.requirements[0].minValues",
                "more than the 1 values",
            ),
            (
                {"template": {"spec": {"requirements": [{"key": "a", "operator": "Gt", "values": [3]}]}}},
                "spec.template.spec.requirements[0].values[0]",
                "(quote it)",
            ),
            (
                {"template": {"spec": {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}]}}},
                "spec.template.spec.requirements[0].key",
                "set by Joiner",
            ),
            (
                {"template": {"spec": {"requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Lt", "values": ["-4"]}]}}},
                "spec.template.spec.requirements[0].values",
                "single non-negative integer",
            ),
            ({"template": {"metadata": {"labels": {"joiner.dev/nodepool": "x"}}}}, "spec.template.metadata.labels.joiner.dev/nodepool", "set by Joiner"),
            (
                {"template": {"spec": {"nodeClassRef": {"group": "example.com", "kind": "Other", "name": "x"}}}},
                "spec.template.spec.nodeClassRef",
                "must reference",
            ),
            ({"template": {"spec": {"nodeClassRef": {"kind": "NodeClass"}}}}, "spec.template.spec.nodeClassRef.name", "required"),
            ({"template": {"spec": {"taints": [{"key": "k", "effect": "Never"}]}}}, "spec.template.spec.taints[0].effect", "'Never' is not one of"),
        ],
    )
    def test_validation(self, spec: dict[str, Any], field: str, problem: str) -> None:
        error = error_of(parse_node_pool, {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": spec})
        assert error.object_ref == "NodePool gpu"
        assert error.field == field
        assert problem in error.problem
        assert str(error).startswith(f"NodePool gpu: {field}: ")


# ---------------------------------------------------------------- NodeClasses

BRIEF_NODE_CLASS = """
apiVersion: joiner.dev/v1
kind: NodeClass
metadata: {name: default}
spec:
  amiFamily: AL2023
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {joiner.dev/discovery: my-cluster}}, {id: subnet-123}]
  securityGroupSelectorTerms: [{tags: {joiner.dev/discovery: my-cluster}}, {id: sg-123}, {name: my-sg}]
  role: JoinerNodeRole-my-cluster
  kubelet: {maxPods: 110, podsPerCore: 0, systemReserved: {cpu: 100m}, kubeReserved: {memory: 1Gi}, evictionHard: {memory.available: 100Mi, nodefs.available: "10%"}}
  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeSize: 20Gi, volumeType: gp3, encrypted: true, deleteOnTermination: true}}]
  tags: {team: a}
  metadataOptions: {httpPutResponseHopLimit: 2}
  userData: "echo hi"
"""


class TestNodeClass:
    def test_every_field(self) -> None:
        (node_class,) = load_snapshot_yaml(BRIEF_NODE_CLASS).node_classes
        assert node_class.ami_family == "AL2023"
        assert node_class.ami_selector_terms == (SelectorTerm(alias="al2023@latest"),)
        assert node_class.subnet_selector_terms == (SelectorTerm(tags=(("joiner.dev/discovery", "my-cluster"),)), SelectorTerm(id="subnet-123"))
        assert node_class.security_group_selector_terms[2] == SelectorTerm(name="my-sg")
        assert node_class.role == "JoinerNodeRole-my-cluster" and node_class.instance_profile is None
        kubelet = node_class.kubelet
        assert (kubelet.max_pods, kubelet.pods_per_core) == (110, None)
        assert kubelet.system_reserved == Resources({"cpu": 100}) and kubelet.kube_reserved == Resources({"memory": GI})
        assert kubelet.eviction_hard == {"memory.available": "100Mi", "nodefs.available": "10%"}
        assert node_class.block_device_mappings == (
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}},
        )
        assert node_class.tags == {"team": "a"} and node_class.user_data == "echo hi"
        assert node_class.metadata_options == {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 2,
            "httpTokens": "required",
        }

    def test_defaults(self) -> None:
        node_class = parse_node_class({"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "d"}})
        assert node_class.ami_family == "AL2023" and node_class.ami_selector_terms == (SelectorTerm(alias="al2023@latest"),)
        assert node_class.metadata_options == {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        }
        assert node_class.kubelet.kube_reserved is None and node_class.kubelet.max_pods is None
        assert node_class.role is None and node_class.user_data is None
        # A Karpenter EC2NodeClass (planning only) keeps Karpenter's families; a NodeClass admits AL2023 only.
        bottlerocket = parse_node_class({"kind": "EC2NodeClass", "metadata": {"name": "b"}, "spec": {"amiFamily": "Bottlerocket"}})
        assert bottlerocket.ami_selector_terms == (SelectorTerm(alias="bottlerocket@latest"),)
        with pytest.raises(SnapshotError, match="'Bottlerocket' is not supported"):
            parse_node_class({"kind": "NodeClass", "metadata": {"name": "b"}, "spec": {"amiFamily": "Bottlerocket"}})
        pinned = parse_node_class({"kind": "NodeClass", "metadata": {"name": "p"}, "spec": {"amiSelectorTerms": [{"alias": "al2023@v20240807"}]}})
        assert pinned.ami_family == "AL2023" and pinned.ami_selector_terms == (SelectorTerm(alias="al2023@v20240807"),)

    def test_explicit_zero_kube_reserved_is_kept(self) -> None:
        kubelet = parse_node_class(
            {"kind": "NodeClass", "metadata": {"name": "d"}, "spec": {"kubelet": {"kubeReserved": {"cpu": "0", "memory": "1Gi"}}}}
        ).kubelet
        assert kubelet.kube_reserved is not None
        assert dict(kubelet.kube_reserved.items()) == {"cpu": 0, "memory": GI}  # cpu 0 replaces the formula, it is not "unset"

    def test_block_device_mappings_are_copies(self) -> None:
        obj = {"kind": "NodeClass", "metadata": {"name": "d"}, "spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi"}}]}}
        node_class = parse_node_class(obj)
        obj["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"] = "1Ti"  # type: ignore[index]
        assert node_class.block_device_mappings[0]["ebs"] == {"volumeSize": "20Gi"}

    def test_karpenter_ec2_node_class(self) -> None:
        snapshot = load_snapshot_yaml(
            """
            apiVersion: karpenter.k8s.aws/v1
            kind: EC2NodeClass
            metadata: {name: default}
            spec:
              amiSelectorTerms: [{alias: bottlerocket@v1.20.0}]
              subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
              securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
              instanceProfile: KarpenterNodeInstanceProfile
              detailedMonitoring: true
              kubelet: {maxPods: 58}
            """
        )
        (node_class,) = snapshot.node_classes
        assert node_class.ami_family == "Bottlerocket"
        assert node_class.ami_selector_terms == (SelectorTerm(alias="bottlerocket@v1.20.0"),)
        assert node_class.subnet_selector_terms == (SelectorTerm(tags=(("karpenter.sh/discovery", "demo"),)),)
        assert node_class.instance_profile == "KarpenterNodeInstanceProfile" and node_class.kubelet.max_pods == 58
        ami_by_name = parse_node_class(
            {
                "kind": "EC2NodeClass",
                "metadata": {"name": "c"},
                "spec": {"amiFamily": "AL2023", "amiSelectorTerms": [{"name": "my-ami-*", "owner": "self"}, {"id": "ami-123"}]},
            }
        )
        assert ami_by_name.ami_selector_terms == (SelectorTerm(name="my-ami-*", owner="self"), SelectorTerm(id="ami-123"))

    @pytest.mark.parametrize(
        ("spec", "field", "problem"),
        [
            ({"amiFamily": "Ubuntu"}, "spec.amiFamily", "'Ubuntu' is not supported"),
            ({"amiFamily": "Windows2022"}, "spec.amiFamily", "Joiner launches AL2023 only"),
            ({"amiFamily": "Bottlerocket"}, "spec.amiFamily", "'Bottlerocket' is not supported"),
            ({"amiFamily": "AL2"}, "spec.amiFamily", "AL2 is end-of-life"),
            ({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest or al2023@vYYYYMMDD"),
            ({"amiSelectorTerms": [{"alias": "al2@latest"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest"),
            ({"amiSelectorTerms": [{"alias": "al2023@v1.2"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest"),
            ({"amiSelectorTerms": [{"alias": "al2023@newest"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest"),
            ({"amiSelectorTerms": [{"id": "i-123"}]}, "spec.amiSelectorTerms[0].id", "such as ami-0123abcd"),
            ({"subnetSelectorTerms": [{"id": "sg-123"}]}, "spec.subnetSelectorTerms[0].id", "such as subnet-0123abcd"),
            ({"securityGroupSelectorTerms": [{"id": "subnet-1"}]}, "spec.securityGroupSelectorTerms[0].id", "such as sg-0123abcd"),
            ({"kubelet": {"systemReserved": {"nvidia.com/gpu": "1"}}}, "spec.kubelet.systemReserved.nvidia.com/gpu", "cannot be reserved"),
            ({"blockDeviceMappings": [{"deviceName": "xvda"}]}, "spec.blockDeviceMappings[0].deviceName", "such as /dev/xvda"),
            (
                {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True}, {"deviceName": "/dev/xvdb", "rootVolume": True}]},
                "spec.blockDeviceMappings[1].rootVolume",
                "at most one",
            ),
            ({"amiFamily": "AL2", "amiSelectorTerms": [{"alias": "al2023@latest"}]}, "spec.amiFamily", "'AL2' is not supported"),
            ({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest"),
            ({"amiSelectorTerms": [{"alias": "al2023"}]}, "spec.amiSelectorTerms[0].alias", "expected al2023@latest"),
            ({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}, "spec.amiSelectorTerms[0].alias", "only AMI selector term"),
            ({"amiSelectorTerms": [{"id": "ami-1", "name": "x"}]}, "spec.amiSelectorTerms[0].id", "cannot be combined with name"),
            ({"amiSelectorTerms": [{"ssmParameter": "/aws/x"}]}, "spec.amiSelectorTerms[0].ssmParameter", "not supported"),
            ({"amiSelectorTerms": [{"owner": "self"}]}, "spec.amiSelectorTerms[0].owner", "needs name or tags"),
            ({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-1"}]}, "spec.amiFamily", "'Custom' is not supported"),
            ({"subnetSelectorTerms": [{}]}, "spec.subnetSelectorTerms[0]", "needs one of id, tags"),
            ({"subnetSelectorTerms": [{"name": "x"}]}, "spec.subnetSelectorTerms[0].name", "not supported"),
            ({"subnetSelectorTerms": [{"tags": {"k": ""}}]}, "spec.subnetSelectorTerms[0].tags", "must not be empty"),
            ({"securityGroupSelectorTerms": [{"tags": {}}]}, "spec.securityGroupSelectorTerms[0].tags", "must not be empty"),
            ({"role": "r", "instanceProfile": "p"}, "spec.instanceProfile", "not both"),
            ({"kubelet": {"maxPods": 0}}, "spec.kubelet.maxPods", "at least 1"),
            ({"kubelet": {"maxPods": "110"}}, "spec.kubelet.maxPods", "expected an integer"),
            ({"kubelet": {"systemReserved": {"memory": "1Gb"}}}, "spec.kubelet.systemReserved.memory", "invalid quantity '1Gb'"),
            ({"kubelet": {"kubeReserved": {"cpu": "-1"}}}, "spec.kubelet.kubeReserved.cpu", "must not be negative"),
            ({"kubelet": {"evictionHard": {"memory.free": "1Gi"}}}, "spec.kubelet.evictionHard.memory.free", "unknown eviction signal"),
            ({"kubelet": {"evictionHard": {"memory.available": "120%"}}}, "spec.kubelet.evictionHard.memory.available", "invalid percentage"),
            ({"kubelet": {"evictionHard": {"memory.available": "lots"}}}, "spec.kubelet.evictionHard.memory.available", "invalid quantity"),
            ({"blockDeviceMappings": [{"ebs": {}}]}, "spec.blockDeviceMappings[0].deviceName", "required"),
            (
                {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "big"}}]},
                "spec.blockDeviceMappings[0].ebs.volumeSize",
                "invalid quantity",
            ),
            (
                {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "yes"}}]},
                "spec.blockDeviceMappings[0].ebs.encrypted",
                "expected true or false",
            ),
            ({"metadataOptions": {"httpTokens": "maybe"}}, "spec.metadataOptions.httpTokens", "'maybe' is not one of required, optional"),
            ({"metadataOptions": {"httpPutResponseHopLimit": 65}}, "spec.metadataOptions.httpPutResponseHopLimit", "at most 64"),
            ({"metadataOptions": {"httpEndPoint": "enabled"}}, "spec.metadataOptions.httpEndPoint", "unknown option"),
            ({"tags": {"kubernetes.io/cluster/demo": "owned"}}, "spec.tags.kubernetes.io/cluster/demo", "set by Joiner"),
            ({"tags": {"joiner.dev/nodepool": "x"}}, "spec.tags.joiner.dev/nodepool", "set by Joiner"),
            ({"userData": ["x"]}, "spec.userData", "expected a string"),
        ],
    )
    def test_validation(self, spec: dict[str, Any], field: str, problem: str) -> None:
        error = error_of(parse_node_class, {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "nc"}, "spec": spec})
        assert error.object_ref == "NodeClass nc"
        assert error.field == field
        assert problem in error.problem


# ---------------------------------------------------------------- whole snapshots


def runtime_class(name: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": name, "overhead": {"podFixed": {"cpu": cpu}}}


class TestParseObjects:
    def test_dispatch_lists_and_ignored_kinds(self) -> None:
        objects = [
            pod_object("b", runtimeClassName="kata"),  # before its RuntimeClass: still gets the overhead
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"x": "y"}},
            {"apiVersion": "v1", "kind": "List", "items": [pod_object("a", nodeName="n1", status={"phase": "Running"}), runtime_class("kata", "250m")]},
            {"apiVersion": "v1", "kind": "NodeList", "items": [{"metadata": {"name": "n1"}}]},  # raw API list: items carry no kind
            {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "default"}},
            {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "default"}},
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "x", "labels": {"karpenter.sh/nodepool": "default"}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            },
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
            pod_object("done", status={"phase": "Succeeded"}, nodeName="n1"),
        ]
        snapshot = parse_objects(objects)
        assert [p.name for p in snapshot.pods] == ["a", "b", "done"]
        assert snapshot.pods[1].requests["cpu"] == 350
        assert [n.name for n in snapshot.nodes] == ["n1"]
        assert snapshot.runtime_classes == {"kata": Resources({"cpu": 250})}
        assert [p.name for p in snapshot.pending_pods] == ["b"]
        assert [p.name for p in snapshot.bound_pods] == ["a"]
        assert [p.name for p in snapshot.node_pools] == ["default"] and [c.name for c in snapshot.node_classes] == ["default"]
        assert [(c.name, c.node_pool) for c in snapshot.node_claims] == [("x", "default")]

    def test_empty(self) -> None:
        assert parse_objects([]) == Snapshot()
        assert Snapshot().pending_pods == () and Snapshot().bound_pods == ()

    def test_sorted_whatever_the_input_order(self) -> None:
        forward = parse_objects([pod_object("a", "y"), pod_object("b", "x"), pod_object("a", "x")])
        backward = parse_objects([pod_object("a", "x"), pod_object("b", "x"), pod_object("a", "y")])
        assert [p.key for p in forward.pods] == ["x/a", "x/b", "y/a"] == [p.key for p in backward.pods]

    @pytest.mark.parametrize(
        ("objects", "message"),
        [
            ([["not", "an", "object"]], "object 1: expected a Kubernetes object (a mapping with apiVersion and kind), got a list"),
            (["Pod"], "object 1: expected a Kubernetes object"),
            ([pod_object("a"), {"apiVersion": "v1", "metadata": {"name": "x"}}], "object 2 (x): kind: required"),
            ([{"apiVersion": "v1", "kind": "List", "items": [pod_object("a"), 5]}], "object 1 items[1]: expected a Kubernetes object"),
            ([{"apiVersion": "v1", "kind": "List", "items": {"a": 1}}], "List (object 1): items: expected a list"),
            (
                [{"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "n"}}],
                "PodDisruptionBudget n/p: apiVersion: 'policy/v1beta1' is not supported (expected policy/v1)",
            ),
            (
                [{"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "p"}}],
                "NodePool p: apiVersion: 'karpenter.sh/v1beta1' is not supported (expected joiner.dev/v1 or karpenter.sh/v1)",
            ),
            ([{"kind": "Pod", "metadata": {"name": "p"}, "spec": {}}], "Pod default/p: apiVersion: None is not supported (expected v1)"),
            ([pod_object("a"), pod_object("a")], "Pod default/a: metadata.name: appears twice (also at Pod default/a)"),
            (
                [
                    {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "d"}},
                    {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "d"}},
                ],
                "EC2NodeClass d: metadata.name: appears twice (also at NodeClass d)",
            ),
            ([{"apiVersion": "v1", "kind": "Pod", "metadata": "web"}], "Pod (object 1): metadata: expected a mapping, got string 'web'"),
            ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "a"}, "spec": {}}], "Pod (object 1): metadata.name: required"),
            ([runtime_class("kata", "lots")], "RuntimeClass kata: overhead.podFixed.cpu: invalid quantity 'lots'"),
        ],
    )
    def test_errors(self, objects: list[Any], message: str) -> None:
        assert str(error_of(parse_objects, objects)).startswith(message)


class TestLoadYaml:
    def test_multi_document_with_lists_and_empty_documents(self) -> None:
        text = textwrap.dedent(
            """
            ---
            # comment only
            ---
            apiVersion: v1
            kind: Pod
            metadata:
              name: web-1
              namespace: shop
              creationTimestamp: 2024-05-01T12:00:00Z
              labels: {app: web}
            spec:
              containers:
                - name: app
                  resources: {requests: {cpu: 1, memory: 0.5Gi}}
            ---
            apiVersion: v1
            kind: List
            items:
              - apiVersion: apps/v1
                kind: DaemonSet
                metadata: {name: ds, namespace: kube-system}
                spec: {template: {spec: {containers: [{name: c, resources: {requests: {cpu: 50m}}}]}}}
              - apiVersion: policy/v1
                kind: PodDisruptionBudget
                metadata: {name: web, namespace: shop}
                spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}
            ---
            """
        )
        snapshot = load_snapshot_yaml(text)
        (pod,) = snapshot.pods
        assert pod.key == "shop/web-1" and pod.requests == Resources({"cpu": 1000, "memory": GI // 2, **POD_SLOT})
        assert pod.created == datetime(2024, 5, 1, 12, tzinfo=UTC)
        assert snapshot.daemonsets[0].pod.requests["cpu"] == 50
        assert snapshot.pdbs[0].selects(pod)
        assert load_snapshot_yaml("") == Snapshot() and load_snapshot_yaml("---\n---\n") == Snapshot()

    def test_syntax_error_names_the_line(self) -> None:
        error = error_of(load_snapshot_yaml, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [unclosed\n")
        assert error.object_ref == "snapshot" and error.field.startswith("line 5")
        error = error_of(load_snapshot_yaml, "kind: Pod\n  bad: indent\n")
        assert str(error).startswith("snapshot: line 2, column 6: mapping values are not allowed")  # libyaml: "in this context"

    def test_duplicate_keys_are_errors(self) -> None:
        text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    resources:\n      requests: {cpu: 1, cpu: 2}\n"
        error = error_of(load_snapshot_yaml, text)
        assert str(error) == "snapshot: line 8, column 26: duplicate key 'cpu'"

    def test_document_errors_name_the_document(self) -> None:
        error = error_of(load_snapshot_yaml, "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n---\n- just\n- a list\n")
        assert str(error).startswith("document 2: expected a Kubernetes object")
        error = error_of(
            load_snapshot_yaml, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: abc}}}]}\n"
        )
        assert str(error).startswith("Pod default/p: spec.containers[0].resources.requests.cpu: invalid quantity 'abc'")

    def test_yaml_booleans_in_string_fields_are_refused(self) -> None:
        error = error_of(load_snapshot_yaml, "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {spot: yes}}\n")
        assert str(error) == "Node n: metadata.labels.spot: expected a string, got boolean true (quote it)"


def test_yaml_merge_keys_may_be_overridden() -> None:
    text = textwrap.dedent(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers:
            - name: a
              resources:
                requests:
                  <<: {cpu: 1, memory: 1Gi}
                  cpu: 2
        """
    )
    (pod,) = load_snapshot_yaml(text).pods
    assert pod.requests == Resources({"cpu": 2000, "memory": GI, **POD_SLOT})
