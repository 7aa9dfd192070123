"""EC2/SSM/EKS adapter: selector resolution, AMIs, launch templates, EC2 Fleet and instances.

Implements :class:`joiner.ports.Ec2Port`. Every AWS failure that survives botocore's retries
(standard mode, 5 attempts, see :mod:`joiner.adapters.aws`) becomes :class:`joiner.ports.Ec2Error`
with the AWS error code; an invalid NodeClass becomes :class:`NodeClassConfigError` (a subclass)
naming the field. See docs/aws.md for the launch template and idempotency design.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from joiner.domain import labels as wk
from joiner.domain.amis import AMI_FAMILY, STANDARD, AmiError, al2023_parameter, parse_alias
from joiner.domain.launch import CLIENT_TOKEN_TAG, CLUSTER_TAG, cluster_tags
from joiner.domain.model import NodeClass, SelectorTerm, Taint
from joiner.domain.quantity import QuantityError, parse_quantity
from joiner.domain.userdata import ClusterBootstrap, UserDataError, build_user_data, encode_user_data
from joiner.ports import (
    CAPACITY_BLOCK,
    LAUNCH_TEMPLATE_NOT_FOUND_CODES,
    CapacityReservation,
    Clock,
    ClusterInfo,
    Ec2Error,
    FleetError,
    FleetRequest,
    FleetResult,
    InstanceRecord,
    LaunchedInstance,
    LaunchTemplateInfo,
    LaunchTemplateNotFound,
    LaunchTemplateRef,
    Subnet,
)

__all__ = [
    "Ec2Adapter",
    "NodeClassConfigError",
    "LaunchTemplateInfo",
    "LIVE_INSTANCE_STATES",
    "NODECLASS_TAG",
    "template_name",
    "ami_parameter_path",
]

T = TypeVar("T")

#: Instance states that still hold (or may again hold) capacity: what "exists" means for Joiner.
LIVE_INSTANCE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
#: Spot price history products of Linux instances (EC2-Classic's and VPC's spellings).
SPOT_PRODUCT_DESCRIPTIONS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
#: A claim already has an instance when one is in these states (shutting-down ones are on their way out).
_CLAIM_GUARD_STATES = ("pending", "running", "stopping", "stopped")
NODECLASS_TAG = "joiner.dev/nodeclass"
#: Resources a launch template tags at launch. Spot instance requests are not among them: the
#: template serves both capacity types, and the launch policy authorises them untagged.
TEMPLATE_TAGGED_RESOURCES = ("instance", "volume", "network-interface")
_EC2_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "arm64", "aarch64": "arm64"}
_K8S_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_K8S_VERSION = re.compile(r"^\d+\.\d+$")
_LAUNCH_TEMPLATE_NOT_FOUND = LAUNCH_TEMPLATE_NOT_FOUND_CODES
_DEFAULT_METADATA_OPTIONS = {
    "HttpEndpoint": "enabled",
    "HttpProtocolIpv6": "disabled",
    "HttpPutResponseHopLimit": 1,
    "HttpTokens": "required",
}
_METADATA_KEYS = {
    "httpEndpoint": ("HttpEndpoint", ("enabled", "disabled")),
    "httpProtocolIPv6": ("HttpProtocolIpv6", ("enabled", "disabled")),
    "httpPutResponseHopLimit": ("HttpPutResponseHopLimit", None),
    "httpTokens": ("HttpTokens", ("required", "optional")),
    "instanceMetadataTags": ("InstanceMetadataTags", ("enabled", "disabled")),
}
_EBS_KEYS = {
    "volumeSize": "VolumeSize",
    "volumeType": "VolumeType",
    "encrypted": "Encrypted",
    "deleteOnTermination": "DeleteOnTermination",
    "iops": "Iops",
    "throughput": "Throughput",
    "kmsKeyID": "KmsKeyId",
    "snapshotID": "SnapshotId",
}
_VOLUME_TYPES = ("gp3", "gp2", "io1", "io2", "st1", "sc1", "standard")
_GIB = 2**30


class NodeClassConfigError(Ec2Error):
    """A NodeClass that cannot be turned into a launch (message names the NodeClass and field)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="InvalidNodeClass")


def ami_parameter_path(kubernetes_version: str, arch: str, release: str = "latest", variant: str = STANDARD) -> str:
    """SSM parameter holding the EKS-optimised AL2023 AMI id of ``variant`` (see
    :func:`joiner.domain.amis.al2023_parameter`).

    ``release`` is ``latest`` (the ``recommended`` parameter) or a pinned release ``vYYYYMMDD``.
    """
    try:
        return al2023_parameter(kubernetes_version, arch, variant, release)
    except AmiError as error:
        raise NodeClassConfigError(str(error)) from None


def template_name(cluster: str, node_class: str, arch: str, digest: str) -> str:
    """``joiner-<cluster>-<nodeclass>-<arch>-<hash>``, within EC2's 128 characters.

    The hash covers every input of the template, so the readable parts may be shortened safely.
    """
    return f"joiner-{cluster[:40]}-{node_class[:40]}-{arch}-{digest[:16]}"


def _tags_dict(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or ()}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Ec2Adapter:
    """:class:`joiner.ports.Ec2Port` over boto3 EC2, SSM and EKS clients.

    ``default_instance_profile`` is used for NodeClasses naming neither ``role`` nor
    ``instanceProfile`` (the stack's ``JOINER_NODE_ROLE``). A role is mapped to the instance
    profile of the same name, which the CDK stack creates alongside the role.
    """

    def __init__(
        self,
        ec2: Any,
        ssm: Any,
        eks: Any,
        cluster_name: str,
        clock: Clock,
        *,
        default_instance_profile: str | None = None,
        cache_seconds: float = 300.0,
    ) -> None:
        self._ec2 = ec2
        self._ssm = ssm
        self._eks = eks
        self.cluster_name = cluster_name
        self._clock = clock
        self._default_instance_profile = default_instance_profile
        self._cache_ttl = timedelta(seconds=cache_seconds)
        self._ssm_cache: dict[str, tuple[str, datetime]] = {}
        self._templates: dict[str, LaunchTemplateRef] = {}
        self._clusters: dict[str, ClusterInfo] = {}

    # ------------------------------------------------------------ plumbing

    def _call(self, service: str, operation: str, function: Callable[..., T], **kwargs: Any) -> T:
        try:
            return function(**kwargs)
        except ClientError as error:
            info = error.response.get("Error", {})
            code = str(info.get("Code", "Unknown"))
            raise Ec2Error(f"{service} {operation} failed: {code}: {info.get('Message', '')}", code=code) from error
        except BotoCoreError as error:
            raise Ec2Error(f"{service} {operation} failed: {error}", code=type(error).__name__) from error

    def _paginate(self, client: Any, service: str, operation: str, key: str, **kwargs: Any) -> list[Any]:
        def run() -> list[Any]:
            out: list[Any] = []
            for page in client.get_paginator(operation).paginate(**kwargs):
                out.extend(page.get(key, []))
            return out

        return self._call(service, operation, run)

    # ------------------------------------------------------------ selectors

    @staticmethod
    def _term_filters(term: SelectorTerm, id_filter: str, name_filter: str | None, where: str) -> list[dict[str, Any]]:
        filters: list[dict[str, Any]] = []
        if term.id:
            filters.append({"Name": id_filter, "Values": [term.id]})
        exact = [(k, v) for k, v in term.tags if v != "*"]
        wildcard = [k for k, v in term.tags if v == "*"]
        for key, value in exact:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
        if wildcard:
            filters.append({"Name": "tag-key", "Values": [wildcard[0]]})  # the rest are checked on the results
        if term.name:
            filters.append({"Name": name_filter or "tag:Name", "Values": [term.name]})
        if term.alias:
            raise NodeClassConfigError(f"{where}: alias is only valid in amiSelectorTerms")
        if not filters:
            raise NodeClassConfigError(f"{where}: selector term is empty (set id, name or tags)")
        return filters

    @staticmethod
    def _term_matches(term: SelectorTerm, resource_id: str, name: str | None, tags: Mapping[str, str]) -> bool:
        if term.id and term.id != resource_id:
            return False
        if term.name and term.name != name:
            return False
        for key, value in term.tags:
            if key not in tags or (value != "*" and tags[key] != value):
                return False
        return True

    def resolve_subnets(self, terms: Sequence[SelectorTerm]) -> list[Subnet]:
        """Subnets matching any term (all of a term's fields must match), sorted by (zone, id).

        A tag value ``*`` matches any value of that key; ``name`` matches the ``Name`` tag.
        """
        found: dict[str, Subnet] = {}
        for index, term in enumerate(terms):
            where = f"subnetSelectorTerms[{index}]"
            filters = self._term_filters(term, "subnet-id", "tag:Name", where)
            for raw in self._paginate(self._ec2, "ec2", "describe_subnets", "Subnets", Filters=filters):
                tags = _tags_dict(raw.get("Tags"))
                if not self._term_matches(term, raw["SubnetId"], tags.get("Name"), tags):
                    continue
                found[raw["SubnetId"]] = Subnet(
                    id=raw["SubnetId"],
                    zone=raw["AvailabilityZone"],
                    available_ips=int(raw.get("AvailableIpAddressCount", 0)),
                    tags=tags,
                    map_public_ip=raw.get("MapPublicIpOnLaunch") is True,
                )
        return sorted(found.values(), key=lambda s: (s.zone, s.id))

    def resolve_capacity_reservations(self, terms: Sequence[SelectorTerm]) -> list[CapacityReservation]:
        """Active capacity reservations matching any term, sorted by id: ``id``, or every tag
        (``*`` any value) and ``owner`` (the owning account, for shared reservations)."""
        found: dict[str, CapacityReservation] = {}
        for index, term in enumerate(terms):
            where = f"capacityReservationSelectorTerms[{index}]"
            filters = [{"Name": "state", "Values": ["active"]}]
            if term.owner:
                filters.append({"Name": "owner-id", "Values": [term.owner]})
            extra: dict[str, Any] = {}
            if term.id:
                extra["CapacityReservationIds"] = [term.id]
            else:
                filters += [f for f in self._term_filters(term, "capacity-reservation-id", None, where) if f["Name"] != "capacity-reservation-id"]
            for raw in self._paginate(self._ec2, "ec2", "describe_capacity_reservations", "CapacityReservations", Filters=filters, **extra):
                tags = _tags_dict(raw.get("Tags"))
                if raw.get("State") != "active" or not self._term_matches(term, raw["CapacityReservationId"], None, tags):
                    continue
                if term.owner and raw.get("OwnerId") != term.owner:
                    continue
                found[raw["CapacityReservationId"]] = CapacityReservation(
                    id=raw["CapacityReservationId"],
                    instance_type=raw["InstanceType"],
                    zone=raw["AvailabilityZone"],
                    available=int(raw.get("AvailableInstanceCount", 0)),
                    owner_id=str(raw.get("OwnerId", "")),
                    match_criteria=str(raw.get("InstanceMatchCriteria", "open")),
                    reservation_type=str(raw.get("ReservationType", "default")),
                    end_time=raw.get("EndDate"),
                )
        return [found[key] for key in sorted(found)]

    def resolve_security_groups(self, terms: Sequence[SelectorTerm]) -> list[str]:
        """Ids of security groups matching any term, sorted; ``name`` matches the group name."""
        found: set[str] = set()
        for index, term in enumerate(terms):
            where = f"securityGroupSelectorTerms[{index}]"
            filters = self._term_filters(term, "group-id", "group-name", where)
            for raw in self._paginate(self._ec2, "ec2", "describe_security_groups", "SecurityGroups", Filters=filters):
                tags = _tags_dict(raw.get("Tags"))
                if self._term_matches(term, raw["GroupId"], raw.get("GroupName"), tags):
                    found.add(raw["GroupId"])
        return sorted(found)

    # ------------------------------------------------------------ AMIs

    def _ssm_parameter(self, path: str) -> str:
        now = self._clock.now()
        cached = self._ssm_cache.get(path)
        if cached is not None and now - cached[1] < self._cache_ttl:
            return cached[0]
        try:
            response = self._call("ssm", "get_parameter", self._ssm.get_parameter, Name=path)
        except Ec2Error as error:
            if error.code == "ParameterNotFound":
                raise Ec2Error(f"SSM parameter {path} does not exist (unknown Kubernetes version or AMI release?)", code="AMINotFound") from error
            raise
        value = str(response["Parameter"]["Value"])
        self._ssm_cache[path] = (value, now)
        return value

    def resolve_ami(self, node_class: NodeClass, kubernetes_version: str, arch: str, variant: str = STANDARD) -> str:
        """The AMI for this NodeClass, Kubernetes version, architecture and AL2023 variant.

        Alias terms (``al2023@latest``, ``al2023@vYYYYMMDD``) read the EKS-optimised AL2023 AMI
        of ``variant`` (``standard``, ``nvidia``, ``neuron``: see :mod:`joiner.domain.amis`)
        from SSM (cached for a few minutes). Other terms (id / tags / name, optional owner) go
        through DescribeImages restricted to the architecture, whatever the variant; the newest
        match wins (ties: id). Name-only terms default to owners ``self`` and ``amazon`` so a
        public look-alike AMI can never be picked up.
        """
        where = f"NodeClass {node_class.name}"
        if (node_class.ami_family or AMI_FAMILY) != AMI_FAMILY:
            raise NodeClassConfigError(f"{where}: spec.amiFamily {node_class.ami_family!r} is not supported (AL2023 only)")
        ec2_arch = _EC2_ARCH.get(arch)
        if ec2_arch is None:
            raise NodeClassConfigError(f"{where}: architecture {arch!r} is not supported (amd64 or arm64)")
        if not _K8S_VERSION.match(kubernetes_version or ""):
            raise Ec2Error(f"Kubernetes version {kubernetes_version!r} must look like 1.31", code="InvalidKubernetesVersion")
        terms = node_class.ami_selector_terms or (SelectorTerm(alias="al2023@latest"),)
        aliases = [term for term in terms if term.alias]
        if aliases:
            if len(terms) > 1:
                raise NodeClassConfigError(f"{where}: spec.amiSelectorTerms: an alias term must be the only term")
            alias = aliases[0].alias or ""
            if aliases[0].tags or aliases[0].id or aliases[0].name:
                raise NodeClassConfigError(f"{where}: spec.amiSelectorTerms[0]: alias cannot be combined with other fields")
            try:
                release = parse_alias(alias)
            except AmiError as error:
                raise NodeClassConfigError(f"{where}: spec.amiSelectorTerms[0]: {error}") from None
            try:
                path = al2023_parameter(kubernetes_version, arch, variant, release)
            except AmiError as error:
                raise Ec2Error(f"{where}: {error}", code="AMINotFound") from None
            return self._ssm_parameter(path)

        candidates: dict[str, tuple[str, str]] = {}
        for index, term in enumerate(terms):
            term_where = f"{where} spec.amiSelectorTerms[{index}]"
            filters = self._term_filters(term, "image-id", "name", term_where)
            filters += [{"Name": "architecture", "Values": [ec2_arch]}, {"Name": "state", "Values": ["available"]}]
            kwargs: dict[str, Any] = {"Filters": filters}
            if term.owner:
                kwargs["Owners"] = [term.owner]
            elif term.name and not term.id:
                kwargs["Owners"] = ["self", "amazon"]
            response = self._call("ec2", "describe_images", self._ec2.describe_images, **kwargs)
            for image in response.get("Images", []):
                tags = _tags_dict(image.get("Tags"))
                # name filters may use wildcards, so only id and tags are re-checked here
                if self._term_matches(replace(term, name=None), image["ImageId"], None, tags):
                    candidates[image["ImageId"]] = (str(image.get("CreationDate", "")), image["ImageId"])
        if not candidates:
            raise Ec2Error(f"{where}: no available {ec2_arch} AMI matches spec.amiSelectorTerms", code="AMINotFound")
        return max(candidates.values())[1]

    # ------------------------------------------------------------ launch templates

    def instance_profile(self, node_class: NodeClass) -> str:
        """The instance profile to launch with (see :meth:`_instance_profile`); raises
        :class:`NodeClassConfigError` when Joiner may not pass it."""
        return self._instance_profile(node_class)

    def _instance_profile(self, node_class: NodeClass) -> str:
        """The instance profile to launch with. A deployed adapter (``default_instance_profile``
        set from ``JOINER_NODE_ROLE``) accepts only the stack's node role or its same-named
        profile: the functions' ``iam:PassRole`` covers that role alone, so any other would
        fail every launch with AccessDenied."""

        def name(value: str) -> str:
            # arn:aws:iam::123456789012:role/path/Name -> Name; the stack names the profile like the role.
            return value.rsplit("/", 1)[-1] if value.startswith("arn:") else value

        field, chosen = ("spec.instanceProfile", node_class.instance_profile) if node_class.instance_profile else ("spec.role", node_class.role)
        default = name(self._default_instance_profile) if self._default_instance_profile else None
        if chosen and default and name(chosen) != default:
            raise NodeClassConfigError(
                f"NodeClass {node_class.name}: {field} {chosen!r} is not allowed: Joiner may pass only its node role "
                f"{default} (iam:PassRole is scoped to it); name that role, or leave spec.role unset"
            )
        profile = chosen or default
        if not profile:
            raise NodeClassConfigError(f"NodeClass {node_class.name}: set spec.role or spec.instanceProfile")
        return name(profile)

    @staticmethod
    def _metadata_options(node_class: NodeClass) -> dict[str, Any]:
        options = dict(_DEFAULT_METADATA_OPTIONS)
        for key, value in (node_class.metadata_options or {}).items():
            if key not in _METADATA_KEYS:
                raise NodeClassConfigError(f"NodeClass {node_class.name}: spec.metadataOptions.{key} is not a known option")
            ec2_key, allowed = _METADATA_KEYS[key]
            if allowed is None:
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
                    raise NodeClassConfigError(f"NodeClass {node_class.name}: spec.metadataOptions.{key} must be an integer 1-64, got {value!r}")
            elif value not in allowed:
                raise NodeClassConfigError(f"NodeClass {node_class.name}: spec.metadataOptions.{key} must be one of {list(allowed)}, got {value!r}")
            options[ec2_key] = value
        return dict(sorted(options.items()))

    @staticmethod
    def _block_device_mappings(node_class: NodeClass) -> list[dict[str, Any]]:
        mappings = node_class.block_device_mappings or (
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}},
        )
        out: list[dict[str, Any]] = []
        for index, mapping in enumerate(mappings):
            where = f"NodeClass {node_class.name} spec.blockDeviceMappings[{index}]"
            device = mapping.get("deviceName")
            if not isinstance(device, str) or not device.startswith("/dev/"):
                raise NodeClassConfigError(f"{where}.deviceName must be a device path like /dev/xvda, got {device!r}")
            unknown = set(mapping) - {"deviceName", "ebs", "rootVolume"}
            if unknown:
                raise NodeClassConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
            ebs_in = mapping.get("ebs") or {}
            if not isinstance(ebs_in, Mapping):
                raise NodeClassConfigError(f"{where}.ebs must be a mapping")
            unknown = set(ebs_in) - set(_EBS_KEYS)
            if unknown:
                raise NodeClassConfigError(f"{where}.ebs: unknown field(s) {sorted(unknown)}")
            ebs: dict[str, Any] = {"VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
            for key, value in ebs_in.items():
                ec2_key = _EBS_KEYS[key]
                if key == "volumeSize":
                    try:
                        size = parse_quantity(value)
                    except (QuantityError, TypeError, ValueError) as error:
                        raise NodeClassConfigError(f"{where}.ebs.volumeSize: {error}") from None
                    if size < _GIB:
                        raise NodeClassConfigError(f"{where}.ebs.volumeSize {value!r} is under 1Gi (write e.g. 20Gi)")
                    gib = -(-size // _GIB)
                    value = int(gib)
                elif key == "volumeType":
                    if value not in _VOLUME_TYPES:
                        raise NodeClassConfigError(f"{where}.ebs.volumeType must be one of {list(_VOLUME_TYPES)}, got {value!r}")
                elif key in ("encrypted", "deleteOnTermination"):
                    if not isinstance(value, bool):
                        raise NodeClassConfigError(f"{where}.ebs.{key} must be true or false, got {value!r}")
                elif key in ("iops", "throughput"):
                    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                        raise NodeClassConfigError(f"{where}.ebs.{key} must be a positive integer, got {value!r}")
                elif not isinstance(value, str) or not value:
                    raise NodeClassConfigError(f"{where}.ebs.{key} must be a non-empty string")
                ebs[ec2_key] = value
            if "VolumeSize" not in ebs and "SnapshotId" not in ebs:
                raise NodeClassConfigError(f"{where}.ebs.volumeSize is required")
            out.append({"DeviceName": device, "Ebs": dict(sorted(ebs.items()))})
        return out

    def _template_inputs(
        self,
        node_class: NodeClass,
        cluster: ClusterInfo,
        security_groups: Sequence[str],
        ami_id: str,
        labels: Mapping[str, str] | None,
        taints: Sequence[Taint],
    ) -> tuple[dict[str, Any], dict[str, str]]:
        where = f"NodeClass {node_class.name}"
        if not security_groups:
            raise NodeClassConfigError(f"{where}: spec.securityGroupSelectorTerms matched no security group")
        if not ami_id:
            raise NodeClassConfigError(f"{where}: no AMI")
        bootstrap = ClusterBootstrap(
            name=cluster.name,
            api_server_endpoint=cluster.endpoint,
            certificate_authority=cluster.certificate_authority,
            service_cidr=cluster.service_cidr,
            cluster_dns=cluster.cluster_dns,
        )
        try:
            user_data = build_user_data(
                bootstrap, node_class.kubelet, labels, taints, node_class.user_data, where=where, instance_store_policy=node_class.instance_store_policy
            )
            resource_tags = cluster_tags(cluster.name, node_class.tags, where=f"{where} spec.tags")
        except (UserDataError, ValueError) as error:
            raise NodeClassConfigError(f"{where}: {error}") from error
        resource_tags[NODECLASS_TAG] = node_class.name
        resource_tags = dict(sorted(resource_tags.items()))
        data: dict[str, Any] = {
            "BlockDeviceMappings": self._block_device_mappings(node_class),
            "IamInstanceProfile": {"Name": self._instance_profile(node_class)},
            "ImageId": ami_id,
            "MetadataOptions": self._metadata_options(node_class),
            "SecurityGroupIds": sorted(set(security_groups)),
            # Every resource the launch creates, so the launch policy's aws:RequestTag condition
            # holds for each (the fleet tags itself, its instances and volumes again).
            "TagSpecifications": [{"ResourceType": resource, "Tags": _tag_list(resource_tags)} for resource in TEMPLATE_TAGGED_RESOURCES],
            "UserData": encode_user_data(user_data),
        }
        return data, resource_tags

    def ensure_launch_template(
        self,
        node_class: NodeClass,
        arch: str,
        cluster: ClusterInfo,
        security_groups: Sequence[str],
        ami_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        capacity_reservation_id: str | None = None,
        tenancy: str = "default",
        reservation_type: str = "default",
    ) -> LaunchTemplateRef:
        """The launch template for these exact inputs, created on first use. With
        ``capacity_reservation_id`` its instances launch into that reservation (a template per
        reservation: CreateFleet cannot target one any other way); a ``capacity-block``
        reservation also needs the capacity-block market (``InstanceMarketOptions``).

        Its name ends in a hash of the whole template (AMI, user data with labels/taints, SGs,
        profile, devices, metadata options, tags), so any NodeClass or NodePool change yields a
        new template and an unchanged one is found by name. The name is the idempotency key: a
        concurrent creator's ``AlreadyExists`` is resolved by describing again. (No ClientToken:
        EC2 would answer a re-creation after gc deleted the template with the deleted one.)
        """
        k8s_arch = _K8S_ARCH.get(_EC2_ARCH.get(arch, ""), "")
        if not k8s_arch:
            raise NodeClassConfigError(f"NodeClass {node_class.name}: architecture {arch!r} is not supported (amd64 or arm64)")
        data, resource_tags = self._template_inputs(node_class, cluster, security_groups, ami_id, labels, taints)
        if tenancy != "default":
            data["Placement"] = {"Tenancy": tenancy}
        if capacity_reservation_id:
            data["CapacityReservationSpecification"] = {"CapacityReservationTarget": {"CapacityReservationId": capacity_reservation_id}}
            if reservation_type == CAPACITY_BLOCK:
                data["InstanceMarketOptions"] = {"MarketType": CAPACITY_BLOCK}
        digest = hashlib.sha256(json.dumps({"data": data, "tags": resource_tags}, sort_keys=True).encode()).hexdigest()
        name = template_name(cluster.name, node_class.name, k8s_arch, digest)
        cached = self._templates.get(name)
        if cached is not None:
            return cached
        ref = self._describe_template(name)
        if ref is None:
            try:
                response = self._call(
                    "ec2",
                    "create_launch_template",
                    self._ec2.create_launch_template,
                    LaunchTemplateName=name,
                    LaunchTemplateData=data,
                    TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tag_list(resource_tags)}],
                )
                template = response["LaunchTemplate"]
                ref = LaunchTemplateRef(template["LaunchTemplateId"], name, str(template.get("DefaultVersionNumber", 1)))
            except Ec2Error as error:
                if error.code != "InvalidLaunchTemplateName.AlreadyExistsException":
                    raise
                ref = self._describe_template(name)
                if ref is None:
                    raise
        self._templates[name] = ref
        return ref

    def _describe_template(self, name: str) -> LaunchTemplateRef | None:
        response = self._call(
            "ec2",
            "describe_launch_templates",
            self._ec2.describe_launch_templates,
            Filters=[{"Name": "launch-template-name", "Values": [name]}],
        )
        for template in response.get("LaunchTemplates", []):
            if template.get("LaunchTemplateName") == name:
                return LaunchTemplateRef(template["LaunchTemplateId"], name, str(template.get("DefaultVersionNumber", 1)))
        return None

    def list_launch_templates(self, cluster_name: str | None = None) -> list[LaunchTemplateInfo]:
        """Launch templates Joiner created for ``cluster_name`` (default: the adapter's cluster):
        tagged ``joiner.dev/cluster=<cluster>`` and named ``joiner-...``, by name (for gc)."""
        cluster = cluster_name or self.cluster_name
        raw = self._paginate(
            self._ec2,
            "ec2",
            "describe_launch_templates",
            "LaunchTemplates",
            Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}],
            PaginationConfig={"PageSize": 200},  # EC2's maximum: fewer calls (and moto does not paginate)
        )
        out = []
        for template in raw:
            tags = _tags_dict(template.get("Tags"))
            if not template["LaunchTemplateName"].startswith("joiner-") or tags.get(CLUSTER_TAG) != cluster:
                continue
            created = template.get("CreateTime")
            out.append(
                LaunchTemplateInfo(
                    ref=LaunchTemplateRef(template["LaunchTemplateId"], template["LaunchTemplateName"], str(template.get("DefaultVersionNumber", 1))),
                    node_class=tags.get(NODECLASS_TAG, ""),
                    created=created if isinstance(created, datetime) else None,
                )
            )
        return sorted(out, key=lambda info: info.ref.name)

    def delete_launch_template(self, template_id: str) -> None:
        """Delete a launch template; one already gone is not an error."""
        for name in [n for n, ref in self._templates.items() if ref.id == template_id]:
            del self._templates[name]
        try:
            self._call("ec2", "delete_launch_template", self._ec2.delete_launch_template, LaunchTemplateId=template_id)
        except Ec2Error as error:
            if error.code not in _LAUNCH_TEMPLATE_NOT_FOUND:
                raise

    # ------------------------------------------------------------ fleet

    def _claim_instances(self, claim_id: str) -> list[LaunchedInstance]:
        reservations = self._paginate(
            self._ec2,
            "ec2",
            "describe_instances",
            "Reservations",
            Filters=[
                {"Name": f"tag:{wk.NODECLAIM}", "Values": [claim_id]},
                {"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster_name]},
                {"Name": "instance-state-name", "Values": list(_CLAIM_GUARD_STATES)},
            ],
        )
        out = []
        for reservation in reservations:
            for instance in reservation.get("Instances", []):
                out.append(
                    LaunchedInstance(
                        instance_id=instance["InstanceId"],
                        instance_type=instance["InstanceType"],
                        zone=instance.get("Placement", {}).get("AvailabilityZone", ""),
                        capacity_type=wk.CAPACITY_TYPE_SPOT if instance.get("InstanceLifecycle") == "spot" else wk.CAPACITY_TYPE_ON_DEMAND,
                        subnet_id=instance.get("SubnetId", ""),
                    )
                )
        return sorted(out, key=lambda i: i.instance_id)

    def create_fleet(self, request: FleetRequest) -> FleetResult:
        """One ``instant`` CreateFleet.

        Idempotent twice over: the request's ClientToken makes EC2 return the original result
        for a retried call, and, because that guarantee is EC2's alone (and emulators lack it),
        a claim that already has a live instance tagged ``joiner.dev/nodeclaim=<claim>`` gets
        that instance back without a new launch.

        A launch template that no longer exists (gc deleted it), whether EC2 rejects the call
        or answers with fleet errors and no instance, raises :class:`LaunchTemplateNotFound`
        after forgetting the cached template, so ``ensure_launch_template`` creates it again.
        """
        if not request.overrides:
            raise Ec2Error("CreateFleet needs at least one override", code="NoOverrides")
        claim_id = request.tags.get(wk.NODECLAIM)
        if claim_id:
            existing = self._claim_instances(claim_id)
            if existing:
                return FleetResult(instances=tuple(existing))
        zone_of_subnet = {o.subnet_id: o.zone for o in request.overrides}
        reserved = request.capacity_type == wk.CAPACITY_TYPE_RESERVED
        capacity_block = reserved and request.reservation_type == CAPACITY_BLOCK
        by_template: dict[str, tuple[LaunchTemplateRef, list[dict[str, Any]]]] = {}
        for requested in request.overrides:
            item: dict[str, Any] = {"InstanceType": requested.instance_type, "SubnetId": requested.subnet_id, "AvailabilityZone": requested.zone}
            if requested.priority is not None:
                item["Priority"] = float(requested.priority)
            template = requested.launch_template or request.launch_template
            by_template.setdefault(template.id, (template, []))[1].append(item)
        tags = dict(request.tags)
        tags.setdefault(CLIENT_TOKEN_TAG, request.client_token)
        params: dict[str, Any] = {
            "Type": "instant",
            "ClientToken": request.client_token,
            # One config per template (AMI variant), in the order of their cheapest override.
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {"LaunchTemplateId": template.id, "Version": template.version},
                    "Overrides": overrides,
                }
                for template, overrides in by_template.values()
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": request.target_capacity,
                # A reserved launch is on-demand into the reservation its overrides' templates
                # target, or the capacity-block market for a Capacity Block.
                "DefaultTargetCapacityType": ((CAPACITY_BLOCK if capacity_block else wk.CAPACITY_TYPE_ON_DEMAND) if reserved else request.capacity_type),
            },
            "TagSpecifications": [{"ResourceType": resource, "Tags": _tag_list(tags)} for resource in ("instance", "volume", "fleet")],
        }
        if request.capacity_type == wk.CAPACITY_TYPE_SPOT:
            params["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        elif not capacity_block:
            params["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        try:
            response = self._call("ec2", "create_fleet", self._ec2.create_fleet, **params)
        except Ec2Error as error:
            if error.code in _LAUNCH_TEMPLATE_NOT_FOUND:
                self._forget_templates(request)
                raise LaunchTemplateNotFound(str(error), error.code, request.launch_template) from error
            raise

        instances: list[LaunchedInstance] = []
        for entry in response.get("Instances", []) or []:
            override = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            subnet_id = override.get("SubnetId", "")
            zone = override.get("AvailabilityZone") or zone_of_subnet.get(subnet_id, "")
            capacity_type = request.capacity_type if reserved else entry.get("Lifecycle") or request.capacity_type
            for instance_id in entry.get("InstanceIds", []) or []:
                instances.append(
                    LaunchedInstance(
                        instance_id=instance_id,
                        instance_type=entry.get("InstanceType") or override.get("InstanceType", ""),
                        zone=zone,
                        capacity_type=capacity_type,
                        subnet_id=subnet_id,
                    )
                )
        errors: list[FleetError] = []
        for entry in response.get("Errors", []) or []:
            override = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            subnet_id = override.get("SubnetId")
            errors.append(
                FleetError(
                    code=str(entry.get("ErrorCode", "Unknown")),
                    message=str(entry.get("ErrorMessage", "")),
                    instance_type=override.get("InstanceType"),
                    zone=override.get("AvailabilityZone") or (zone_of_subnet.get(subnet_id) if subnet_id else None),
                    subnet_id=subnet_id,
                    capacity_type=request.capacity_type if reserved else entry.get("Lifecycle") or request.capacity_type,
                )
            )
        missing = next((e for e in errors if e.code in _LAUNCH_TEMPLATE_NOT_FOUND), None)
        if missing is not None and not instances:
            self._forget_templates(request)
            raise LaunchTemplateNotFound(
                f"ec2 CreateFleet failed: {missing.code}: {missing.message}",
                missing.code,
                request.launch_template,
            )
        return FleetResult(instances=tuple(instances), errors=tuple(errors))

    def _forget_templates(self, request: FleetRequest) -> None:
        ids = {template.id for template in request.launch_templates}
        self._templates = {n: r for n, r in self._templates.items() if r.id not in ids}

    # ------------------------------------------------------------ instances

    def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        """Terminate; ids that no longer exist (or are already terminated) are not an error."""
        ids = sorted(set(instance_ids))
        for chunk in _chunks(ids, 500):
            try:
                self._call("ec2", "terminate_instances", self._ec2.terminate_instances, InstanceIds=list(chunk))
            except Ec2Error as error:
                if error.code != "InvalidInstanceID.NotFound":
                    raise
                # EC2 rejects the whole call when any id is unknown: retry the others one by one.
                for instance_id in chunk:
                    try:
                        self._call("ec2", "terminate_instances", self._ec2.terminate_instances, InstanceIds=[instance_id])
                    except Ec2Error as single:
                        if single.code != "InvalidInstanceID.NotFound":
                            raise

    @staticmethod
    def _record(instance: Mapping[str, Any]) -> InstanceRecord:
        launch_time = instance.get("LaunchTime")
        return InstanceRecord(
            instance_id=instance["InstanceId"],
            instance_type=instance.get("InstanceType", ""),
            zone=instance.get("Placement", {}).get("AvailabilityZone", ""),
            state=instance.get("State", {}).get("Name", ""),
            launch_time=launch_time if isinstance(launch_time, datetime) else None,
            tags=_tags_dict(instance.get("Tags")),
            capacity_type=wk.CAPACITY_TYPE_SPOT if instance.get("InstanceLifecycle") == "spot" else wk.CAPACITY_TYPE_ON_DEMAND,
            image_id=str(instance.get("ImageId") or ""),
            subnet_id=str(instance.get("SubnetId") or ""),
            security_group_ids=tuple(sorted({str(g["GroupId"]) for g in instance.get("SecurityGroups") or () if g.get("GroupId")})),
            capacity_reservation_id=str(instance.get("CapacityReservationId") or ""),
        )

    def _describe(self, filters: list[dict[str, Any]]) -> list[InstanceRecord]:
        reservations = self._paginate(self._ec2, "ec2", "describe_instances", "Reservations", Filters=filters)
        records = {i["InstanceId"]: self._record(i) for r in reservations for i in r.get("Instances", [])}
        return [records[key] for key in sorted(records)]

    def describe_instances(self, instance_ids: Sequence[str]) -> list[InstanceRecord]:
        """Records for the ids that exist (any state, terminated included); unknown ids are skipped."""
        ids = sorted(set(instance_ids))
        out: list[InstanceRecord] = []
        for chunk in _chunks(ids, 200):  # EC2 accepts up to 200 values per filter
            out.extend(self._describe([{"Name": "instance-id", "Values": list(chunk)}]))
        return sorted(out, key=lambda r: r.instance_id)

    def list_cluster_instances(self, cluster_name: str) -> list[InstanceRecord]:
        """Live (not terminated) instances tagged ``joiner.dev/cluster=<cluster_name>``, by id."""
        return self._describe(
            [
                {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]},
                {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
            ]
        )

    def reservation_instances(self, cluster_name: str, reservation_id: str) -> list[InstanceRecord]:
        """Live instances tagged ``joiner.dev/cluster=<cluster_name>`` running in capacity
        reservation ``reservation_id``, by id."""
        return self._describe(
            [
                {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]},
                {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
                {"Name": "capacity-reservation-id", "Values": [reservation_id]},
            ]
        )

    # ------------------------------------------------------------ prices

    def spot_prices(self) -> dict[tuple[str, str], float]:
        """The newest Linux/UNIX spot price per ``(instance type, zone)``.

        ``StartTime`` = now makes EC2 return only the price in force for each pair (a few
        pages of 1,000 for a whole region). Prices EC2 reports as zero or unparseable are
        skipped: an offering priced at nothing would win every plan."""
        entries = self._paginate(
            self._ec2,
            "ec2",
            "describe_spot_price_history",
            "SpotPriceHistory",
            ProductDescriptions=list(SPOT_PRODUCT_DESCRIPTIONS),
            StartTime=self._clock.now(),
            PaginationConfig={"PageSize": 1000},
        )
        newest: dict[tuple[str, str], tuple[datetime, float]] = {}
        for entry in entries:
            key = (str(entry.get("InstanceType", "")), str(entry.get("AvailabilityZone", "")))
            try:
                price = float(entry.get("SpotPrice", ""))
            except ValueError:
                continue
            if not key[0] or not key[1] or not price > 0:
                continue
            stamp = entry.get("Timestamp")
            stamp = stamp if isinstance(stamp, datetime) else datetime.min.replace(tzinfo=UTC)
            if key not in newest or stamp > newest[key][0]:
                newest[key] = (stamp, price)
        return {key: price for key, (_, price) in sorted(newest.items())}

    def describe_instance_types(self) -> list[dict[str, Any]]:
        """Every instance type EC2 describes in the region (about ten pages of 100)."""
        return list(self._paginate(self._ec2, "ec2", "describe_instance_types", "InstanceTypes", PaginationConfig={"PageSize": 100}))

    def instance_type_zones(self) -> dict[str, list[str]]:
        """Zones per instance type, from the availability-zone offerings (sorted)."""
        offerings = self._paginate(
            self._ec2,
            "ec2",
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            PaginationConfig={"PageSize": 1000},
        )
        zones: dict[str, set[str]] = {}
        for offering in offerings:
            name, zone = str(offering.get("InstanceType", "")), str(offering.get("Location", ""))
            if name and zone:
                zones.setdefault(name, set()).add(zone)
        return {name: sorted(found) for name, found in sorted(zones.items())}

    def zone_ids(self) -> dict[str, str]:
        """Zone name -> zone id of the region's availability zones (every opt-in state)."""
        response = self._call("ec2", "describe_availability_zones", self._ec2.describe_availability_zones, AllAvailabilityZones=True)
        return {
            str(zone["ZoneName"]): str(zone["ZoneId"])
            for zone in sorted(response.get("AvailabilityZones", []), key=lambda z: str(z.get("ZoneName", "")))
            if zone.get("ZoneName") and zone.get("ZoneId") and zone.get("ZoneType", "availability-zone") == "availability-zone"
        }

    # ------------------------------------------------------------ cluster

    def describe_cluster(self, cluster_name: str) -> ClusterInfo:
        """Endpoint, CA, version and service CIDR from EKS; the cluster DNS address is the
        service CIDR's ``.10`` (``::a`` for IPv6), as EKS provisions it."""
        cached = self._clusters.get(cluster_name)
        if cached is not None:
            return cached
        raw = self._call("eks", "describe_cluster", self._eks.describe_cluster, name=cluster_name)["cluster"]
        network = raw.get("kubernetesNetworkConfig") or {}
        cidr = network.get("serviceIpv4Cidr") or network.get("serviceIpv6Cidr") or "172.20.0.0/16"
        try:
            dns = str(ipaddress.ip_network(cidr, strict=False).network_address + 10)
        except ValueError:
            dns = None
        info = ClusterInfo(
            name=raw.get("name", cluster_name),
            endpoint=raw.get("endpoint", ""),
            certificate_authority=(raw.get("certificateAuthority") or {}).get("data", ""),
            version=str(raw.get("version", "")),
            service_cidr=cidr,
            cluster_dns=dns,
        )
        if not info.endpoint or not info.certificate_authority:
            raise Ec2Error(f"EKS cluster {cluster_name} has no endpoint or certificate authority yet (status {raw.get('status')})", code="ClusterNotReady")
        self._clusters[cluster_name] = info
        return info
