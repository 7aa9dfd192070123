"""Which EKS-optimised AL2023 AMI an instance type needs, and where SSM publishes it.

EKS publishes three AL2023 variants per Kubernetes version and architecture: ``standard``,
``nvidia`` (NVIDIA driver and container toolkit) and ``neuron`` (AWS Neuron driver, x86_64
only). As in Karpenter's AWS provider (``pkg/providers/amifamily``), an ``al2023@<version>``
alias resolves per instance type: types with an NVIDIA GPU get ``nvidia``, types with an AWS
accelerator (Inferentia, Trainium) get ``neuron``, every other type ``standard``. AMIs chosen
by id, name or tags are used as they are for every type.

AL2023 is the only supported family: the NodeClass CRD and :mod:`joiner.domain.snapshot`
reject the others at admission (see docs/aws.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from joiner.domain import labels as wk
from joiner.domain.model import InstanceType, Node

__all__ = [
    "AMI_FAMILY",
    "ALIAS_PATTERN",
    "STANDARD",
    "NVIDIA",
    "NEURON",
    "VARIANTS",
    "EC2_ARCH",
    "PUBLISHED",
    "AmiError",
    "parse_alias",
    "variant_requirements",
    "variant_of_labels",
    "variant_of",
    "node_variant",
    "ami_key",
    "al2023_parameter",
]

#: The one supported ``spec.amiFamily``.
AMI_FAMILY = "AL2023"
#: ``al2023@latest`` or a pinned EKS AMI release ``al2023@vYYYYMMDD``.
ALIAS_PATTERN = re.compile(r"^al2023@(latest|v[0-9]{8})$")
STANDARD, NVIDIA, NEURON = "standard", "nvidia", "neuron"
#: Variants in the order they are resolved and reported.
VARIANTS = (STANDARD, NVIDIA, NEURON)
#: ``kubernetes.io/arch`` (or EC2's spelling) -> the architecture in SSM parameter names.
EC2_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "arm64", "aarch64": "arm64"}
#: Variants EKS publishes per architecture (no Neuron AMI for arm64).
_PUBLISHED = {"x86_64": frozenset(VARIANTS), "arm64": frozenset({STANDARD, NVIDIA})}
#: (``kubernetes.io/arch``, variant) pairs EKS publishes AL2023 AMIs for, in report order.
PUBLISHED = (("amd64", STANDARD), ("amd64", NVIDIA), ("amd64", NEURON), ("arm64", STANDARD), ("arm64", NVIDIA))
_K8S_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
#: Accelerator makers whose devices the Neuron AMI drives (Inferentia and Trainium).
_NEURON_MANUFACTURERS = frozenset({"aws"})


class AmiError(ValueError):
    """An alias, architecture, variant or Kubernetes version no AMI parameter exists for."""


def parse_alias(alias: str) -> str:
    """The release of an ``al2023@<release>`` alias: ``latest`` or ``vYYYYMMDD``."""
    match = ALIAS_PATTERN.match(alias)
    if match is None:
        raise AmiError(f"alias {alias!r} is not supported (al2023@latest or al2023@vYYYYMMDD)")
    return match.group(1)


def variant_of_labels(labels: Mapping[str, str]) -> str:
    """The AL2023 variant for an instance with these labels (Joiner or Karpenter keys).

    A GPU count with an NVIDIA (or unstated) maker means ``nvidia``; an accelerator made by
    AWS means ``neuron``; anything else (AMD GPUs included) ``standard``."""
    normal = wk.normalize_labels(dict(labels))
    if normal.get(wk.INSTANCE_GPU_COUNT, "0") not in ("", "0") and normal.get(wk.INSTANCE_GPU_MANUFACTURER, "nvidia") == "nvidia":
        return NVIDIA
    if normal.get(wk.INSTANCE_ACCELERATOR_COUNT, "0") not in ("", "0") and normal.get(wk.INSTANCE_ACCELERATOR_MANUFACTURER) in _NEURON_MANUFACTURERS:
        return NEURON
    return STANDARD


def variant_of(instance_type: InstanceType) -> str:
    """The AL2023 variant an instance type needs (from its single-valued requirements)."""
    labels = {}
    for key in (wk.INSTANCE_GPU_COUNT, wk.INSTANCE_GPU_MANUFACTURER, wk.INSTANCE_ACCELERATOR_COUNT, wk.INSTANCE_ACCELERATOR_MANUFACTURER):
        requirement = instance_type.requirements.get(key)
        value = requirement.any_value() if requirement is not None else None
        if value is not None:
            labels[key] = value
    return variant_of_labels(labels)


def node_variant(node: Node, types: Mapping[str, InstanceType]) -> str:
    """The variant a node runs: from its instance-type labels, else from its instance type."""
    labels = wk.normalize_labels(dict(node.labels))
    if any(key in labels for key in (wk.INSTANCE_GPU_COUNT, wk.INSTANCE_ACCELERATOR_COUNT)):
        return variant_of_labels(labels)
    instance_type = types.get(labels.get(wk.INSTANCE_TYPE, ""))
    return variant_of(instance_type) if instance_type is not None else STANDARD


def variant_requirements(variant: str) -> list[dict[str, object]]:
    """The instance types a variant serves, as node selector requirements (NodeClass
    ``status.amis``): NVIDIA GPUs, AWS accelerators, or neither."""
    if variant == NVIDIA:
        return [{"key": wk.INSTANCE_GPU_MANUFACTURER, "operator": "In", "values": ["nvidia"]}]
    if variant == NEURON:
        return [{"key": wk.INSTANCE_ACCELERATOR_MANUFACTURER, "operator": "In", "values": sorted(_NEURON_MANUFACTURERS)}]
    return [
        {"key": wk.INSTANCE_GPU_MANUFACTURER, "operator": "NotIn", "values": ["nvidia"]},
        {"key": wk.INSTANCE_ACCELERATOR_MANUFACTURER, "operator": "NotIn", "values": sorted(_NEURON_MANUFACTURERS)},
    ]


def ami_key(arch: str, variant: str) -> str:
    """How resolved AMIs are keyed per NodeClass: the architecture for ``standard``
    (``amd64``), ``<arch>/<variant>`` otherwise (``amd64/nvidia``)."""
    return arch if variant == STANDARD else f"{arch}/{variant}"


def al2023_parameter(kubernetes_version: str, arch: str, variant: str = STANDARD, release: str = "latest") -> str:
    """The public SSM parameter holding the EKS-optimised AL2023 AMI id of this variant:
    ``/aws/service/eks/optimized-ami/<ver>/amazon-linux-2023/<x86_64|arm64>/<variant>/recommended/image_id``
    (``amazon-eks-node-al2023-<arch>-<variant>-<ver>-<release>`` instead of ``recommended``
    for a pinned release)."""
    ec2_arch = EC2_ARCH.get(arch)
    if ec2_arch is None:
        raise AmiError(f"architecture {arch!r} is not supported (amd64 or arm64)")
    if variant not in _PUBLISHED[ec2_arch]:
        raise AmiError(f"EKS publishes no AL2023 {variant} AMI for {ec2_arch}")
    if not _K8S_VERSION.match(kubernetes_version or ""):
        raise AmiError(f"Kubernetes version {kubernetes_version!r} must look like 1.31")
    if release != "latest" and not re.fullmatch(r"v[0-9]{8}", release):
        raise AmiError(f"AMI release {release!r} must be latest or vYYYYMMDD")
    name = "recommended" if release == "latest" else f"amazon-eks-node-al2023-{ec2_arch}-{variant}-{kubernetes_version}-{release}"
    return f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/{ec2_arch}/{variant}/{name}/image_id"
