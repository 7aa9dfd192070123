"""The cluster ``bench.scale`` measures, generated from (nodes, seed) alone.

Both sides use it: the stand-in API server (:mod:`bench.kube_standin`) serves its objects,
the harness (:mod:`bench.scale`) fills the EC2 and state fakes with the matching instances and
claims, so the ownership checks (instance tag + claim recording the instance) pass.

Shape, as ``kubectl get -o json`` shows a real EKS cluster: every node an m5.2xlarge of the
``default`` NodePool (labels ``joiner.dev/nodepool``, ``joiner.dev/nodeclaim``, providerID
``aws:///<zone>/i-...``), about 12 KB of JSON (labels, annotations, managedFields, conditions,
addresses, node info, images); 30 pods a node of about 7 KB each (managedFields, ownerReferences,
probes, env, status with container statuses): three DaemonSet pods per node, the rest
ReplicaSet pods, and ``nodes / 5`` of the 30 x nodes pods pending (2 CPU each: they fit on no
existing node). A CSINode per node, three DaemonSets, a PodDisruptionBudget per ten
deployments, one StorageClass, the NodePool/NodeClass and a NodeClaim mirror per claim.

Objects are JSON text filled into a template per kind (:class:`Template`), so the server holds
a few small arrays, not gigabytes of dicts.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from joiner.domain.nodeclaims import TERMINATION_FINALIZER

__all__ = ["CLUSTER", "CSINODE_TEMPLATE", "DAEMONSETS", "NODE_TEMPLATE", "NOW", "PODS_PER_NODE", "POD_TEMPLATES", "Template", "WorldSpec"]

CLUSTER = "bench-cluster"
#: The clock every bench runtime starts at; nodes were created two days before.
NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
CREATED = NOW - timedelta(days=2)
PODS_PER_NODE = 30
#: one pending pod per this many nodes (1,000 at 5,000 nodes)
NODES_PER_PENDING = 5
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
NODE_TYPE = "m5.2xlarge"
DAEMONSETS = ("aws-node", "kube-proxy", "ebs-csi-node")
NAMESPACES = tuple(f"team-{index:02d}" for index in range(20))
POOL = "default"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(index: int, width: int = 5) -> str:
    out = []
    for _ in range(width):
        index, digit = divmod(index, len(_ALPHABET))
        out.append(_ALPHABET[digit])
    return "".join(out)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Template:
    """JSON text with holes: built from an object whose string values may be ``@@key@@``
    (a string hole, inside the quotes) or ``@@#key@@`` (a raw JSON value: numbers, objects)."""

    _HOLE = re.compile(r'"@@#(\w+)@@"|@@(\w+)@@')

    def __init__(self, obj: Any) -> None:
        text = json.dumps(obj, separators=(",", ":"))
        pieces = self._HOLE.split(text)
        self.parts: list[str] = pieces[0::3]
        self.keys: list[str] = [raw or string for raw, string in zip(pieces[1::3], pieces[2::3], strict=True)]

    def fill(self, values: dict[str, str]) -> str:
        out = [self.parts[0]]
        for key, part in zip(self.keys, self.parts[1:], strict=True):
            out.append(values[key])
            out.append(part)
        return "".join(out)


def _managed(manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "@@created@@",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _condition(kind: str, status: str, **extra: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": "@@created@@", **extra}


_CONTAINER_FIELDS = {
    "f:env": {f'k:{{"name":"{name}"}}': {".": {}, "f:name": {}, "f:value": {}} for name in ("LOG_LEVEL", "PORT", "REGION", "OTEL_ENDPOINT")},
    "f:image": {},
    "f:imagePullPolicy": {},
    "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}, "f:periodSeconds": {}, "f:timeoutSeconds": {}},
    "f:name": {},
    "f:ports": {".": {}, 'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
    "f:readinessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}, "f:periodSeconds": {}},
    "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
    "f:securityContext": {".": {}, "f:allowPrivilegeEscalation": {}, "f:readOnlyRootFilesystem": {}, "f:runAsNonRoot": {}},
    "f:terminationMessagePath": {},
    "f:terminationMessagePolicy": {},
    "f:volumeMounts": {".": {}, 'k:{"mountPath":"/tmp"}': {".": {}, "f:mountPath": {}, "f:name": {}}},
}


def _pod_template(kind: str) -> Template:
    """``kind``: ``running`` (ReplicaSet pod on a node), ``pending`` (unschedulable), ``daemon``."""
    daemon = kind == "daemon"
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet" if daemon else "ReplicaSet",
        "name": "@@owner@@",
        "uid": "@@owner_uid@@",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    labels = (
        {"app.kubernetes.io/name": "@@app@@", "controller-revision-hash": "@@hash@@", "pod-template-generation": "3", "k8s-app": "@@app@@"}
        if daemon
        else {
            "app": "@@app@@",
            "app.kubernetes.io/name": "@@app@@",
            "app.kubernetes.io/part-of": "@@namespace@@",
            "pod-template-hash": "@@hash@@",
            "team": "@@namespace@@",
            "version": "v1.42.3",
        }
    )
    container = {
        "name": "@@app@@",
        "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/@@app@@:v1.42.3",
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "PORT", "value": "8080"},
            {"name": "REGION", "value": "us-east-1"},
            {"name": "OTEL_ENDPOINT", "value": "http://otel-collector.observability.svc.cluster.local:4317"},
        ],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "@@cpu@@", "memory": "@@memory@@"}, "limits": {"memory": "@@memory@@"}},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True},
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "kube-api-access-@@token@@", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "tmp", "emptyDir": {}},
            {
                "name": "kube-api-access-@@token@@",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                    "defaultMode": 420,
                },
            },
        ],
        "containers": [container],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "@@app@@",
        "serviceAccount": "@@app@@",
        "securityContext": {"fsGroup": 65534},
        "schedulerName": "default-scheduler",
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    }
    if daemon:
        spec["tolerations"] = [{"operator": "Exists"}]
        spec["priorityClassName"] = "system-node-critical"
        spec["priority"] = 2000001000
        spec["hostNetwork"] = True
    else:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "@@app@@"}},
            }
        ]
    fields_spec = {
        "f:containers": {'k:{"name":"main"}': _CONTAINER_FIELDS},
        "f:dnsPolicy": {},
        "f:enableServiceLinks": {},
        "f:restartPolicy": {},
        "f:schedulerName": {},
        "f:securityContext": {".": {}, "f:fsGroup": {}},
        "f:serviceAccount": {},
        "f:serviceAccountName": {},
        "f:terminationGracePeriodSeconds": {},
        "f:topologySpreadConstraints": {},
        "f:volumes": {".": {}, 'k:{"name":"tmp"}': {".": {}, "f:emptyDir": {}, "f:name": {}}},
    }
    managed = [
        _managed(
            "kube-controller-manager",
            "Update",
            {
                "f:metadata": {
                    "f:generateName": {},
                    "f:labels": {".": {}, **{f"f:{key}": {} for key in labels}},
                    "f:ownerReferences": {".": {}, 'k:{"uid":"@@owner_uid@@"}': {}},
                },
                "f:spec": fields_spec,
            },
        )
    ]
    if kind == "pending":
        spec.pop("nodeName", None)
        status: dict[str, Any] = {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [
                _condition(
                    "PodScheduled",
                    "False",
                    reason="Unschedulable",
                    message="0/@@nodes@@ nodes are available: @@nodes@@ Insufficient cpu. preemption: 0/@@nodes@@ nodes are available: "
                    "@@nodes@@ No preemption victims found for incoming pod.",
                )
            ],
        }
        managed.append(
            _managed(
                "kube-scheduler",
                "Update",
                {
                    "f:status": {
                        "f:conditions": {
                            ".": {},
                            'k:{"type":"PodScheduled"}': {
                                ".": {},
                                "f:lastProbeTime": {},
                                "f:lastTransitionTime": {},
                                "f:message": {},
                                "f:reason": {},
                                "f:status": {},
                                "f:type": {},
                            },
                        }
                    }
                },
                "status",
            )
        )
    else:
        spec["nodeName"] = "@@node@@"
        state = {"running": {"startedAt": "@@created@@"}}
        status = {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "@@host_ip@@",
            "hostIPs": [{"ip": "@@host_ip@@"}],
            "podIP": "@@pod_ip@@",
            "podIPs": [{"ip": "@@pod_ip@@"}],
            "startTime": "@@created@@",
            "conditions": [
                _condition("PodReadyToStartContainers", "True"),
                _condition("Initialized", "True"),
                _condition("Ready", "True"),
                _condition("ContainersReady", "True"),
                _condition("PodScheduled", "True"),
            ],
            "containerStatuses": [
                {
                    "name": "@@app@@",
                    "state": state,
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/@@app@@:v1.42.3",
                    "imageID": "123456789012.dkr.ecr.us-east-1.amazonaws.com/@@app@@@sha256:@@digest@@",
                    "containerID": "containerd://@@digest@@",
                    "started": True,
                }
            ],
        }
        managed.append(
            _managed(
                "kubelet",
                "Update",
                {
                    "f:status": {
                        "f:conditions": {
                            f'k:{{"type":"{c}"}}': {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
                            for c in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")
                        },
                        "f:containerStatuses": {},
                        "f:hostIP": {},
                        "f:hostIPs": {},
                        "f:phase": {},
                        "f:podIP": {},
                        "f:podIPs": {".": {}, 'k:{"ip":"@@pod_ip@@"}': {".": {}, "f:ip": {}}},
                        "f:startTime": {},
                    }
                },
                "status",
            )
        )
    metadata = {
        "name": "@@name@@",
        "generateName": "@@owner@@-",
        "namespace": "@@namespace@@",
        "uid": "@@uid@@",
        "resourceVersion": "@@rv@@",
        "creationTimestamp": "@@created@@",
        "labels": labels,
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-01-03T10:00:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
        "ownerReferences": [owner],
        "managedFields": managed,
    }
    return Template({"metadata": metadata, "spec": spec, "status": status, "kind": "Pod", "apiVersion": "v1"})


def _instance_labels() -> dict[str, str]:
    """The instance-type labels Joiner's registration puts on a Node of :data:`NODE_TYPE` (so a
    round finds the Nodes as Joiner left them and patches none)."""
    from joiner.domain import labels as wk
    from joiner.domain.catalog import load_bundled_catalog
    from joiner.domain.model import KubeletConfig
    from joiner.ports import ClaimRecord
    from joiner.services.registration import claim_labels

    instance_type = load_bundled_catalog().instance_type(NODE_TYPE, KubeletConfig())
    sample = ClaimRecord(claim_id="sample", node_pool=POOL, state="initialized", created_at=CREATED, instance_type=NODE_TYPE)
    per_claim = {wk.NODECLAIM, wk.NODEPOOL, wk.CAPACITY_TYPE, "karpenter.sh/nodepool", "karpenter.sh/capacity-type"}
    return {key: value for key, value in claim_labels(sample, initialized=True, instance_type=instance_type).items() if key not in per_claim}


def _node_template() -> Template:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": NODE_TYPE,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": "us-east-1",
        "failure-domain.beta.kubernetes.io/zone": "@@zone@@",
        "k8s.io/cloud-provider-aws": "a1b2c3d4e5f60718293a4b5c6d7e8f90",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": "@@name@@",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": NODE_TYPE,
        "topology.ebs.csi.aws.com/zone": "@@zone@@",
        "topology.k8s.aws/zone-id": "@@zone_id@@",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": "@@zone@@",
        "joiner.dev/nodepool": POOL,
        "joiner.dev/nodeclaim": "@@claim@@",
        "joiner.dev/capacity-type": "@@capacity@@",
        "joiner.dev/registered": "true",
        "joiner.dev/initialized": "true",
        "joiner.dev/instance-category": "m",
        "joiner.dev/instance-family": "m5",
        "joiner.dev/instance-generation": "5",
        "joiner.dev/instance-size": "2xlarge",
        "joiner.dev/instance-cpu": "8",
        "joiner.dev/instance-memory": "32768",
        "karpenter.sh/nodepool": POOL,
        "karpenter.sh/capacity-type": "@@capacity@@",
        **_instance_labels(),
    }
    resources = {"cpu": "8", "ephemeral-storage": "83873772Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "32386544Ki", "pods": "58"}
    allocatable = {"cpu": "7910m", "ephemeral-storage": "76224326324", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "31369712Ki", "pods": "58"}
    conditions = [
        {"type": kind, "status": "False", "lastHeartbeatTime": "@@heartbeat@@", "lastTransitionTime": "@@created@@", "reason": reason, "message": message}
        for kind, reason, message in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": "@@heartbeat@@",
            "lastTransitionTime": "@@created@@",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    ]
    images = [
        {
            "names": [
                f"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/{name}@sha256:{(name * 8)[:64].encode().hex()[:64]}",
                f"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/{name}:v1.{index}.0-eksbuild.1",
            ],
            "sizeBytes": 10_000_000 + index * 7_777_777,
        }
        for index, name in enumerate(
            (
                "amazon-k8s-cni",
                "amazon-k8s-cni-init",
                "kube-proxy",
                "aws-ebs-csi-driver",
                "csi-node-driver-registrar",
                "livenessprobe",
                "coredns",
                "pause",
                "aws-network-policy-agent",
                "eks-pod-identity-agent",
                "node-exporter",
                "fluent-bit",
                "otel-collector",
                "datadog-agent",
            )
        )
    ]
    images += [
        {
            "names": [
                f"123456789012.dkr.ecr.us-east-1.amazonaws.com/app-{index:03d}@sha256:{index:064x}",
                f"123456789012.dkr.ecr.us-east-1.amazonaws.com/app-{index:03d}:v1.42.3",
            ],
            "sizeBytes": 50_000_000 + index,
        }
        for index in range(14)
    ]
    managed = [
        _managed(
            "kubelet",
            "Update",
            {
                "f:metadata": {
                    "f:annotations": {".": {}, "f:alpha.kubernetes.io/provided-node-ip": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                    "f:labels": {".": {}, **{f"f:{key}": {} for key in labels if not key.startswith(("joiner", "karpenter"))}},
                },
                "f:spec": {"f:providerID": {}},
            },
        ),
        _managed("joiner", "Apply", {"f:metadata": {"f:labels": {f"f:{key}": {} for key in labels if key.startswith(("joiner", "karpenter"))}}}),
        _managed(
            "kube-controller-manager",
            "Update",
            {
                "f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"@@pod_cidr@@"': {}}},
            },
        ),
        _managed(
            "kubelet",
            "Update",
            {
                "f:status": {
                    "f:allocatable": {f"f:{key}": {} for key in allocatable},
                    "f:capacity": {f"f:{key}": {} for key in resources},
                    "f:conditions": {
                        f'k:{{"type":"{c["type"]}"}}': {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}
                        for c in conditions
                    },
                    "f:images": {},
                    "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}, "f:osImage": {}, "f:systemUUID": {}},
                }
            },
            "status",
        ),
    ]
    return Template(
        {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": "@@name@@",
                "uid": "@@uid@@",
                "resourceVersion": "@@rv@@",
                "creationTimestamp": "@@created@@",
                "labels": labels,
                "annotations": {
                    "alpha.kubernetes.io/provided-node-ip": "@@host_ip@@",
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"@@instance@@"}',
                },
                "finalizers": [TERMINATION_FINALIZER],  # what delete-to-drain left on a running cluster's Nodes
                "managedFields": managed,
            },
            "spec": {"providerID": "aws:///@@zone@@/@@instance@@", "podCIDR": "@@pod_cidr@@", "podCIDRs": ["@@pod_cidr@@"]},
            "status": {
                "capacity": resources,
                "allocatable": allocatable,
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": "@@host_ip@@"},
                    {"type": "InternalDNS", "address": "@@name@@"},
                    {"type": "Hostname", "address": "@@name@@"},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": "@@uid_hex@@",
                    "systemUUID": "@@uid@@",
                    "bootID": "@@uid@@",
                    "kernelVersion": "6.1.115-126.197.amzn2023.x86_64",
                    "osImage": "Amazon Linux 2023.6.20241121",
                    "containerRuntimeVersion": "containerd://1.7.23",
                    "kubeletVersion": "v1.31.2-eks-7f9249a",
                    "kubeProxyVersion": "v1.31.2-eks-7f9249a",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "images": images,
            },
        }
    )


def _csinode_template() -> Template:
    return Template(
        {
            "kind": "CSINode",
            "apiVersion": "storage.k8s.io/v1",
            "metadata": {
                "name": "@@name@@",
                "uid": "@@uid@@",
                "resourceVersion": "@@rv@@",
                "creationTimestamp": "@@created@@",
                "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs,kubernetes.io/azure-disk"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "@@name@@", "uid": "@@uid@@"}],
            },
            "spec": {
                "drivers": [
                    {"name": "ebs.csi.aws.com", "nodeID": "@@instance@@", "topologyKeys": ["topology.ebs.csi.aws.com/zone"], "allocatable": {"count": 25}}
                ]
            },
        }
    )


@dataclass(frozen=True)
class WorldSpec:
    """The cluster of ``nodes`` nodes drawn from ``seed`` (names, ids and sizes; no objects)."""

    nodes: int
    seed: int = 1

    @property
    def pods(self) -> int:
        return PODS_PER_NODE * self.nodes

    @property
    def pending(self) -> int:
        return max(1, self.nodes // NODES_PER_PENDING)

    @property
    def bound(self) -> int:
        return self.pods - self.pending

    @property
    def deployments(self) -> int:
        return max(10, self.nodes * (PODS_PER_NODE - len(DAEMONSETS)) // 30)

    # -- names and ids

    def _uid(self, kind: int, index: int) -> str:
        return str(uuid.UUID(int=((self.seed * 0x9E3779B1) & 0xFFFFFFFF) << 96 | kind << 64 | index))

    def node_name(self, index: int) -> str:
        return f"ip-10-{16 + index // 65536}-{index // 256 % 256}-{index % 256}.ec2.internal"

    def node_index(self, name: str) -> int | None:
        match = re.fullmatch(r"ip-10-(\d+)-(\d+)-(\d+)\.ec2\.internal", name)
        if not match:
            return None
        index = (int(match[1]) - 16) * 65536 + int(match[2]) * 256 + int(match[3])
        return index if 0 <= index < self.nodes else None

    def instance_id(self, index: int) -> str:
        return f"i-0{(self.seed * 7919) % 0xFFFFFF:06x}{index:010x}"

    def zone(self, index: int) -> str:
        return ZONES[index % len(ZONES)]

    def claim_id(self, index: int) -> str:
        return f"{POOL}-{_suffix(index * 7 + self.seed, 6)}"

    def capacity_type(self, index: int) -> str:
        return "spot" if index % 2 else "on-demand"

    def host_ip(self, index: int) -> str:
        return f"10.{16 + index // 65536}.{index // 256 % 256}.{index % 256}"

    # -- pods: index p in [0, pods): p < 3 x nodes are DaemonSet pods (DaemonSet p // nodes on
    #    node p % nodes), then ReplicaSet pods on node p % nodes, then the pending pods.

    def pod_kind(self, p: int) -> str:
        if p >= self.bound:
            return "pending"
        return "daemon" if p < len(DAEMONSETS) * self.nodes else "running"

    def pod_node(self, p: int) -> int | None:
        return None if p >= self.bound else p % self.nodes

    def pod_app(self, p: int) -> tuple[str, str]:
        """(namespace, app) of pod ``p``."""
        if p < len(DAEMONSETS) * self.nodes:
            return "kube-system", DAEMONSETS[p // self.nodes]
        if p >= self.bound:
            return NAMESPACES[p % len(NAMESPACES)], f"batch-{p % 17:02d}"
        app = (p * 7919) % self.deployments
        return NAMESPACES[app % len(NAMESPACES)], f"svc-{app:04d}"

    def pod_name(self, p: int) -> tuple[str, str]:
        namespace, app = self.pod_app(p)
        return namespace, f"{app}-{self._hash(app)}-{_suffix(p)}" if self.pod_kind(p) != "daemon" else f"{app}-{_suffix(p)}"

    def _hash(self, app: str) -> str:
        return _suffix(sum(ord(c) * 31**k for k, c in enumerate(app)) + self.seed, 10)

    def pod_labels(self, p: int) -> dict[str, str]:
        namespace, app = self.pod_app(p)
        if self.pod_kind(p) == "daemon":
            return {"app.kubernetes.io/name": app, "controller-revision-hash": self._hash(app), "pod-template-generation": "3", "k8s-app": app}
        return {
            "app": app,
            "app.kubernetes.io/name": app,
            "app.kubernetes.io/part-of": namespace,
            "pod-template-hash": self._hash(app),
            "team": namespace,
            "version": "v1.42.3",
        }

    def pod_values(self, p: int, rv: int) -> dict[str, str]:
        namespace, app = self.pod_app(p)
        _, name = self.pod_name(p)
        kind = self.pod_kind(p)
        node = self.pod_node(p)
        cpu, memory = {"daemon": ("50m", "128Mi"), "running": ("250m", "512Mi"), "pending": ("2", "4Gi")}[kind]
        owner = app if kind == "daemon" else f"{app}-{self._hash(app)}"
        values = {
            "name": name,
            "namespace": namespace,
            "app": app,
            "uid": self._uid(1, p),
            "rv": str(rv),
            "created": _stamp(CREATED),
            "owner": owner,
            "owner_uid": self._uid(2, sum(map(ord, owner))),
            "hash": self._hash(app),
            "cpu": cpu,
            "memory": memory,
            "token": _suffix(p + 11),
            "nodes": str(self.nodes),
            "digest": f"{(p * 2654435761) % (1 << 64):016x}" * 4,
        }
        if node is not None:
            values.update(
                node=self.node_name(node), host_ip=self.host_ip(node), pod_ip=f"10.{100 + node // 65536}.{node // 256 % 256}.{p // self.nodes % 250 + 2}"
            )
        return values

    # -- nodes

    def node_values(self, index: int, rv: int) -> dict[str, str]:
        uid = self._uid(3, index)
        return {
            "name": self.node_name(index),
            "uid": uid,
            "uid_hex": uid.replace("-", ""),
            "rv": str(rv),
            "created": _stamp(CREATED),
            "heartbeat": _stamp(NOW - timedelta(seconds=20)),
            "zone": self.zone(index),
            "zone_id": f"use1-az{index % 3 + 1}",
            "claim": self.claim_id(index),
            "capacity": self.capacity_type(index),
            "host_ip": self.host_ip(index),
            "instance": self.instance_id(index),
            "pod_cidr": f"10.{100 + index // 65536}.{index // 256 % 256}.0/24",
        }

    # -- the small objects (full dicts)

    def node_pool(self) -> dict[str, Any]:
        return {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodePool",
            "metadata": {"name": POOL, "uid": self._uid(4, 1), "generation": 1},
            "spec": {
                "template": {
                    "metadata": {"labels": {}},
                    "spec": {
                        "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                        "requirements": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": ["c5.2xlarge", "c5.4xlarge", "m5.2xlarge", "m5.4xlarge", "r5.2xlarge"],
                            },
                            {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(ZONES)},
                        ],
                    },
                },
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m", "budgets": [{"nodes": "10%"}]},
                "limits": {"cpu": str(self.nodes * 16), "memory": f"{self.nodes * 64}Gi"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": _stamp(CREATED)}]},
        }

    def node_class(self) -> dict[str, Any]:
        return {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodeClass",
            "metadata": {"name": "default", "uid": self._uid(5, 1), "generation": 1},
            "spec": {
                "amiFamily": "AL2023",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
                "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": CLUSTER}}],
                "role": f"JoinerNodeRole-{CLUSTER}",
                "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": _stamp(CREATED)}]},
        }

    def daemonsets(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": "kube-system", "uid": self._uid(2, sum(map(ord, name))), "generation": 3, "labels": {"k8s-app": name}},
                "spec": {
                    "selector": {"matchLabels": {"k8s-app": name}},
                    "template": {
                        "metadata": {"labels": {"k8s-app": name, "app.kubernetes.io/name": name}},
                        "spec": {
                            "priorityClassName": "system-node-critical",
                            "tolerations": [{"operator": "Exists"}],
                            "hostNetwork": True,
                            "containers": [
                                {
                                    "name": name,
                                    "image": f"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/{name}:v1.19.0",
                                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                                }
                            ],
                        },
                    },
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
                },
                "status": {
                    "currentNumberScheduled": self.nodes,
                    "desiredNumberScheduled": self.nodes,
                    "numberAvailable": self.nodes,
                    "numberMisscheduled": 0,
                    "numberReady": self.nodes,
                    "observedGeneration": 3,
                    "updatedNumberScheduled": self.nodes,
                },
            }
            for name in DAEMONSETS
        ]

    def pdbs(self) -> list[dict[str, Any]]:
        out = []
        for app in range(0, self.deployments, 10):
            namespace = NAMESPACES[app % len(NAMESPACES)]
            out.append(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": f"svc-{app:04d}", "namespace": namespace, "uid": self._uid(6, app)},
                    "spec": {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": f"svc-{app:04d}"}}},
                    "status": {"currentHealthy": 30, "desiredHealthy": 22, "disruptionsAllowed": 8, "expectedPods": 30, "observedGeneration": 1},
                }
            )
        return out

    def storage_classes(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "gp3", "uid": self._uid(7, 1), "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "ebs.csi.aws.com",
                "parameters": {"type": "gp3"},
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowVolumeExpansion": True,
            }
        ]

    def claims(self) -> list[Any]:
        """The claim records (state table) of every node, as Joiner wrote them when it launched them."""
        from joiner.ports import ClaimRecord

        launched = CREATED - timedelta(minutes=2)
        return [
            ClaimRecord(
                claim_id=self.claim_id(index),
                node_pool=POOL,
                state="initialized",
                created_at=launched,
                instance_id=self.instance_id(index),
                instance_type=NODE_TYPE,
                zone=self.zone(index),
                capacity_type=self.capacity_type(index),
                price=0.384 if index % 2 == 0 else 0.15,
                node_name=self.node_name(index),
                launched_at=launched,
                registered_at=CREATED,
                initialized_at=CREATED + timedelta(seconds=40),
            )
            for index in range(self.nodes)
        ]

    def node_claims(self) -> list[dict[str, Any]]:
        """The NodeClaim mirrors as the last sync left them (in step with :meth:`claims`)."""
        from joiner.domain.nodeclaims import node_claim_object

        pool = self.node_pool()
        mirrors = [node_claim_object(claim, pool) for claim in self.claims()]
        for mirror in mirrors:
            mirror["metadata"]["finalizers"] = [TERMINATION_FINALIZER]
        return mirrors


POD_TEMPLATES = {kind: _pod_template(kind) for kind in ("running", "pending", "daemon")}
NODE_TEMPLATE = _node_template()
CSINODE_TEMPLATE = _csinode_template()
