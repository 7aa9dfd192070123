"""EC2 user data for Amazon Linux 2023 EKS nodes: a nodeadm ``NodeConfig`` in a MIME multipart archive.

AL2023's ``nodeadm`` reads every ``application/node.eks.aws`` part of the instance's user data and
merges them in order; ``text/x-shellscript`` and ``text/cloud-config`` parts are left to cloud-init.
Joiner's own ``NodeConfig`` comes first and the NodeClass's ``spec.userData`` follows it, split into
its own parts when it is itself a MIME archive, so nested archives never reach nodeadm.

Labels and taints are passed to the kubelet at start (``--node-labels``/``--register-with-taints``)
so a node registers already tainted: no pod can be bound to it between registration and the moment
Joiner would otherwise patch taints on. Labels the kubelet may not set on itself (the
``kubernetes.io``/``k8s.io`` namespaces outside the kubelet's allow-list, ``node-role...``) would
make the kubelet refuse to start, so they are left out of the flag; Joiner applies the full label set
when it registers the node.

Every output is deterministic: same inputs, same bytes (so a launch template name can be a hash of
them). Pure module: no AWS or Kubernetes imports.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from typing import Any, cast

import yaml

from joiner.domain.bounded import InputError, load_yaml
from joiner.domain.model import INSTANCE_STORE_POLICIES, KubeletConfig, Taint
from joiner.domain.resources import Resources

__all__ = [
    "UserDataError",
    "ClusterBootstrap",
    "UserDataPart",
    "NODECONFIG_CONTENT_TYPE",
    "SHELL_CONTENT_TYPE",
    "CLOUD_CONFIG_CONTENT_TYPE",
    "MAX_USER_DATA_BYTES",
    "BOUNDARY",
    "validate_label",
    "validate_taint",
    "kubelet_may_set_label",
    "node_config",
    "render_node_config",
    "build_user_data",
    "parse_user_data",
    "format_exact_quantity",
    "encode_user_data",
    "decode_user_data",
]

NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
SHELL_CONTENT_TYPE = 'text/x-shellscript; charset="us-ascii"'
CLOUD_CONFIG_CONTENT_TYPE = 'text/cloud-config; charset="us-ascii"'
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
#: EC2 limits user data to 16 KiB before base64 encoding.
MAX_USER_DATA_BYTES = 16 * 1024
BOUNDARY = "==JOINER-USERDATA-BOUNDARY=="

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: Labels in the kubernetes.io / k8s.io namespaces the kubelet may set on its own Node
#: (k8s.io/kubelet/pkg/apis: KubeletLabels and KubeletLabelNamespaces).
_KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


class UserDataError(ValueError):
    """Inputs that cannot be rendered into valid user data; the message names the field."""


@dataclass(frozen=True, slots=True)
class ClusterBootstrap:
    """What a node needs to join the cluster (from EKS DescribeCluster)."""

    name: str
    api_server_endpoint: str
    certificate_authority: str  # base64 PEM bundle, as DescribeCluster returns it
    service_cidr: str
    cluster_dns: str | None = None


@dataclass(frozen=True, slots=True)
class UserDataPart:
    content_type: str
    content: str


# ---------------------------------------------------------------- validation


def _validate_key(key: str, where: str) -> None:
    if not isinstance(key, str) or not key:
        raise UserDataError(f"{where}: key must be a non-empty string")
    prefix, _, name = key.rpartition("/")
    if "/" in key:
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            raise UserDataError(f"{where}: key {key!r} has an invalid prefix (must be a DNS subdomain)")
    if len(name) > 63 or not _NAME.match(name):
        raise UserDataError(
            f"{where}: key {key!r} is invalid (name part: at most 63 characters, alphanumerics, '-', '_', '.', starting and ending with an alphanumeric)"
        )


def _validate_value(value: str, where: str) -> None:
    if not isinstance(value, str):
        raise UserDataError(f"{where}: value must be a string, got {type(value).__name__}")
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise UserDataError(
            f"{where}: value {value!r} is invalid (at most 63 characters, alphanumerics, '-', '_', '.', starting and ending with an alphanumeric)"
        )


def validate_label(key: str, value: str, where: str = "label") -> None:
    """Raise :class:`UserDataError` unless ``key=value`` is a valid Kubernetes label.

    Valid labels cannot contain ``,``, ``=``, ``:`` or whitespace, so they cannot inject extra
    entries into the kubelet's comma-separated flags or break out of the YAML document.
    """
    _validate_key(key, f"{where} {key!r}" if isinstance(key, str) else where)
    _validate_value(value, f"{where} {key!r}")


def validate_taint(taint: Taint, where: str = "taint") -> None:
    """Raise :class:`UserDataError` unless ``taint`` has a valid key, value and effect."""
    _validate_key(taint.key, f"{where} {taint.key!r}")
    _validate_value(taint.value, f"{where} {taint.key!r}")
    if taint.effect not in _TAINT_EFFECTS:
        raise UserDataError(f"{where} {taint.key!r}: effect {taint.effect!r} must be one of {', '.join(_TAINT_EFFECTS)}")


def kubelet_may_set_label(key: str) -> bool:
    """Whether the kubelet accepts ``key`` in ``--node-labels`` (otherwise it refuses to start)."""
    prefix = key.rpartition("/")[0]
    if not prefix:
        return True
    restricted = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
    if not restricted:
        return True
    return key in _KUBELET_LABELS or any(prefix == ns or prefix.endswith("." + ns) for ns in _KUBELET_LABEL_NAMESPACES)


# ---------------------------------------------------------------- NodeConfig


def format_exact_quantity(milli: int, resource: str) -> str:
    """Render milli-units as an exact Kubernetes quantity (kubelet config must not round).

    Memory and storage use the largest binary suffix that divides exactly; CPU and other
    resources use whole units or ``m``.
    """
    if milli < 0:
        raise UserDataError(f"{resource}: quantity must not be negative")
    if resource == "memory" or resource.endswith("storage"):
        if milli % 1000 == 0:
            value = milli // 1000
            for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
                if value and value % factor == 0:
                    return f"{value // factor}{suffix}"
            return str(value)
        return f"{milli}m"
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def _quantities(resources: Resources) -> dict[str, str]:
    return {name: format_exact_quantity(resources[name], name) for name in sorted(resources)}


def _label_flag(labels: Mapping[str, str]) -> str | None:
    allowed = sorted((k, v) for k, v in labels.items() if kubelet_may_set_label(k))
    if not allowed:
        return None
    return "--node-labels=" + ",".join(f"{k}={v}" for k, v in allowed)


def _taint_flag(taints: Sequence[Taint]) -> str | None:
    if not taints:
        return None
    rendered = [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in taints]
    return "--register-with-taints=" + ",".join(rendered)


def _unique_taints(taints: Sequence[Taint]) -> tuple[Taint, ...]:
    """Deduplicate on (key, effect), first wins, keeping order (the kubelet rejects duplicates)."""
    seen: set[tuple[str, str]] = set()
    out: list[Taint] = []
    for taint in taints:
        marker = (taint.key, taint.effect)
        if marker not in seen:
            seen.add(marker)
            out.append(taint)
    return tuple(out)


def _validate_cluster(cluster: ClusterBootstrap) -> None:
    if not cluster.name:
        raise UserDataError("cluster name is empty")
    if not cluster.api_server_endpoint.startswith("https://"):
        raise UserDataError(f"cluster {cluster.name}: apiServerEndpoint {cluster.api_server_endpoint!r} must be an https:// URL")
    if any(c.isspace() for c in cluster.api_server_endpoint):
        raise UserDataError(f"cluster {cluster.name}: apiServerEndpoint must not contain whitespace")
    ca = "".join(cluster.certificate_authority.split())
    if not ca or not _BASE64.match(ca):
        raise UserDataError(f"cluster {cluster.name}: certificateAuthority must be base64 data")
    if not cluster.service_cidr or any(c.isspace() for c in cluster.service_cidr):
        raise UserDataError(f"cluster {cluster.name}: service CIDR is missing or malformed")


def node_config(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfig = KubeletConfig(),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    *,
    instance_store_policy: str | None = None,
) -> dict[str, Any]:
    """The nodeadm ``NodeConfig`` document as a dict (validated). ``instance_store_policy``
    ``RAID0`` sets ``spec.instance.localStorage.strategy: RAID0``: nodeadm stripes the
    instance-store NVMe disks into one array and mounts the kubelet's and containerd's data there."""
    if instance_store_policy is not None and instance_store_policy not in INSTANCE_STORE_POLICIES:
        raise UserDataError(f"instanceStorePolicy: expected one of {', '.join(INSTANCE_STORE_POLICIES)}, got {instance_store_policy!r}")
    _validate_cluster(cluster)
    labels = dict(labels or {})
    for key, value in labels.items():
        validate_label(key, value)
    taints = _unique_taints(taints)
    for taint in taints:
        validate_taint(taint)

    config: dict[str, Any] = {}
    if kubelet.max_pods is not None:
        if kubelet.max_pods < 1:
            raise UserDataError(f"kubelet.maxPods must be positive, got {kubelet.max_pods}")
        config["maxPods"] = int(kubelet.max_pods)
    if kubelet.pods_per_core:
        if kubelet.pods_per_core < 0:
            raise UserDataError(f"kubelet.podsPerCore must not be negative, got {kubelet.pods_per_core}")
        config["podsPerCore"] = int(kubelet.pods_per_core)
    if kubelet.system_reserved:
        config["systemReserved"] = _quantities(kubelet.system_reserved)
    if kubelet.kube_reserved:
        config["kubeReserved"] = _quantities(kubelet.kube_reserved)
    if kubelet.eviction_hard:
        eviction: dict[str, str] = {}
        for signal in sorted(kubelet.eviction_hard):
            threshold = str(kubelet.eviction_hard[signal])
            if not re.match(r"^[a-z][a-zA-Z0-9.]*$", signal) or not threshold or any(c.isspace() for c in threshold):
                raise UserDataError(f"kubelet.evictionHard: invalid entry {signal!r}: {threshold!r}")
            eviction[signal] = threshold
        config["evictionHard"] = eviction
    if cluster.cluster_dns:
        config["clusterDNS"] = [cluster.cluster_dns]

    flags = [flag for flag in (_label_flag(labels), _taint_flag(taints)) if flag]
    kubelet_spec: dict[str, Any] = {}
    if config:
        kubelet_spec["config"] = config
    if flags:
        kubelet_spec["flags"] = flags

    spec: dict[str, Any] = {
        "cluster": {
            "name": cluster.name,
            "apiServerEndpoint": cluster.api_server_endpoint,
            "certificateAuthority": "".join(cluster.certificate_authority.split()),
            "cidr": cluster.service_cidr,
        }
    }
    if kubelet_spec:
        spec["kubelet"] = kubelet_spec
    if instance_store_policy is not None:
        spec["instance"] = {"localStorage": {"strategy": instance_store_policy}}
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def render_node_config(document: Mapping[str, Any]) -> str:
    """YAML for a NodeConfig dict, keys sorted, so the same config always renders the same."""
    return "---\n" + yaml.safe_dump(dict(document), sort_keys=True, default_flow_style=False, width=1 << 16)


# ---------------------------------------------------------------- MIME


def _ascii(text: str, where: str) -> str:
    try:
        text.encode("ascii")
    except UnicodeEncodeError:
        raise UserDataError(f"{where}: user data must be ASCII (use base64 in a script for binary content)") from None
    return text


def _custom_parts(user_data: str, where: str) -> list[UserDataPart]:
    """Split the NodeClass's extra user data into MIME parts.

    A MIME multipart archive keeps its parts; otherwise a ``#!`` script is a shell part,
    ``#cloud-config`` a cloud-config part, and a YAML mapping with a ``node.eks.aws`` apiVersion a
    NodeConfig part. Anything else is rejected rather than guessed.
    """
    text = user_data.strip("\n")
    if not text.strip():
        return []
    _ascii(text, where)
    head = text.lstrip()
    if head.startswith(("MIME-Version:", "Content-Type:")):
        return parse_user_data(text, where=where)
    if head.startswith("#!"):
        return [UserDataPart(SHELL_CONTENT_TYPE, text)]
    if head.startswith("#cloud-config"):
        return [UserDataPart(CLOUD_CONFIG_CONTENT_TYPE, text)]
    try:
        document = load_yaml(text)
    except InputError:
        document = None
    if isinstance(document, dict) and str(document.get("apiVersion", "")).startswith("node.eks.aws/"):
        return [UserDataPart(NODECONFIG_CONTENT_TYPE, text)]
    raise UserDataError(
        f"{where}: unrecognised user data: use a MIME multipart archive, a script starting with '#!', "
        "'#cloud-config', or a nodeadm NodeConfig (apiVersion node.eks.aws/v1alpha1)"
    )


def parse_user_data(text: str, *, where: str = "user data") -> list[UserDataPart]:
    """Parts of a MIME multipart user data document (base64 or quoted-printable parts decoded)."""
    message = email.message_from_string(text, policy=email.policy.compat32)
    if not message.is_multipart():
        raise UserDataError(f"{where}: MIME user data must be multipart (Content-Type: multipart/mixed)")
    parts: list[UserDataPart] = []
    for part in cast("list[Message]", message.get_payload()):  # a multipart payload is its list of parts
        if part.is_multipart():
            raise UserDataError(f"{where}: nested multipart archives are not supported")
        content_type = " ".join(str(part.get("Content-Type", "text/plain")).split())
        payload = part.get_payload(decode=True)
        try:
            content = payload.decode("ascii") if isinstance(payload, bytes) else str(part.get_payload())
        except UnicodeDecodeError:
            raise UserDataError(f"{where}: part {content_type} is not ASCII") from None
        parts.append(UserDataPart(content_type, content.strip("\n")))
    return parts


def _serialize(parts: Sequence[UserDataPart]) -> str:
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for part in parts:
        if BOUNDARY in part.content:
            raise UserDataError(f"user data part ({part.content_type}) contains the MIME boundary {BOUNDARY!r}")
        lines += [f"--{BOUNDARY}", f"Content-Type: {part.content_type}", "", part.content.rstrip("\n")]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)


def build_user_data(
    cluster: ClusterBootstrap,
    kubelet: KubeletConfig = KubeletConfig(),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    extra_user_data: str | None = None,
    *,
    where: str = "NodeClass",
    instance_store_policy: str | None = None,
) -> str:
    """The complete user data (plain text, not yet base64): Joiner's NodeConfig then the extra parts.

    Raises :class:`UserDataError` on invalid labels/taints/cluster data, unrecognised extra user
    data, or a result over EC2's 16 KiB limit.
    """
    parts = [
        UserDataPart(NODECONFIG_CONTENT_TYPE, render_node_config(node_config(cluster, kubelet, labels, taints, instance_store_policy=instance_store_policy)))
    ]
    if extra_user_data:
        parts += _custom_parts(extra_user_data, f"{where} spec.userData")
    rendered = _serialize(parts)
    size = len(rendered.encode("ascii"))
    if size > MAX_USER_DATA_BYTES:
        raise UserDataError(f"{where}: user data is {size} bytes, over EC2's limit of {MAX_USER_DATA_BYTES}")
    return rendered


def encode_user_data(user_data: str) -> str:
    """Base64 for EC2's ``UserData`` field."""
    return base64.b64encode(user_data.encode("ascii")).decode("ascii")


def decode_user_data(encoded: str) -> str:
    try:
        return base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError) as error:
        raise UserDataError(f"user data is not base64 ASCII: {error}") from None
