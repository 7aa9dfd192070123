"""Karpenter v1 objects to Joiner's: the one translation ``joiner import-karpenter`` writes out
and the functions apply when they read Karpenter's own objects (``JOINER_KARPENTER_CRDS``).

``karpenter.sh/v1`` NodePools become ``joiner.dev/v1`` NodePools, ``karpenter.k8s.aws/v1``
EC2NodeClasses become ``joiner.dev/v1`` NodeClasses and ``karpenter.sh/v1alpha1`` NodeOverlays
become ``joiner.dev/v1alpha1`` NodeOverlays; every other document is passed through unchanged.
Requirement keys are renamed (``karpenter.sh/capacity-type`` -> ``joiner.dev/capacity-type``,
``karpenter.k8s.aws/instance-*`` -> ``joiner.dev/instance-*``); what Joiner cannot express is
dropped with one warning naming the object and field; what cannot be converted faithfully
is refused (:class:`ConversionError`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn

from joiner.domain import labels as wk
from joiner.domain.known_fields import strict_problem

__all__ = [
    "KARPENTER_NODEPOOL_API",
    "KARPENTER_NODECLASS_API",
    "KARPENTER_OVERLAY_API",
    "JOINER_API",
    "JOINER_OVERLAY_API",
    "Conversion",
    "ConversionError",
    "convert_documents",
    "convert_object",
    "CONDITION_TYPE",
    "READ_FROM_ANNOTATION",
    "KarpenterView",
    "ReadOutcome",
    "ReadReason",
    "read_karpenter",
    "conversion_conditions",
]

KARPENTER_NODEPOOL_API = "karpenter.sh/v1"
KARPENTER_NODECLASS_API = "karpenter.k8s.aws/v1"
KARPENTER_OVERLAY_API = "karpenter.sh/v1alpha1"
JOINER_OVERLAY_API = "joiner.dev/v1alpha1"
JOINER_API = "joiner.dev/v1"

_CONVERTED_KINDS = ((KARPENTER_NODEPOOL_API, "NodePool"), (KARPENTER_NODECLASS_API, "EC2NodeClass"))
_AWS_INSTANCE_PREFIX = "karpenter.k8s.aws/instance-"
_KARPENTER_PREFIXES = ("karpenter.sh/", "karpenter.k8s.aws/")
_CAPACITY_TYPES = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
_AMI_ALIAS_FAMILIES = {"al2023": "AL2023", "al2": "AL2", "bottlerocket": "Bottlerocket"}
#: Karpenter families Joiner converts: AL2023 as it is; AL2 (end-of-life) and Bottlerocket to AL2023
#: with a warning (Joiner launches AL2023 only). Custom (userData as the whole bootstrap) is refused.
_AMI_FAMILIES = ("AL2023", "AL2", "Bottlerocket")
_KUBELET_FIELDS = ("maxPods", "podsPerCore", "systemReserved", "kubeReserved", "evictionHard")
_EBS_FIELDS = ("volumeSize", "volumeType", "iops", "throughput", "encrypted", "kmsKeyID", "deleteOnTermination", "snapshotID")
_METADATA_OPTIONS = ("httpEndpoint", "httpProtocolIPv6", "httpPutResponseHopLimit", "httpTokens")
#: Labels Joiner sets on each node: a NodePool may neither set nor require them.
_PER_NODE_LABELS = frozenset({wk.NODEPOOL, wk.NODECLAIM, wk.HOSTNAME, wk.REGISTERED, wk.INITIALIZED})
_DROPPED_ANNOTATION_PREFIXES = ("karpenter.sh/", "karpenter.k8s.aws/", "kubectl.kubernetes.io/last-applied-configuration")


class ConversionError(ValueError):
    """Malformed input: the message names the document, object and field."""


class _Unconvertible(Exception):
    """A well-formed Karpenter object Joiner has no equivalent for: passed through with a warning."""


@dataclass
class Conversion:
    """Converted documents (input order) and the warnings, one line each."""

    documents: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: How many Karpenter objects were converted (the others passed through).
    converted: int = 0


def convert_documents(documents: Iterable[Any]) -> Conversion:
    """Convert parsed YAML documents; ``kind: List`` documents are converted item by item."""
    conversion = Conversion()

    def convert(item: Any, where: str) -> Any:
        if isinstance(item, Mapping) and (item.get("apiVersion"), item.get("kind")) in _CONVERTED_KINDS:
            conversion.converted += 1
        return _convert_one(item, f"{where}: ", conversion.warnings)

    for index, document in enumerate(documents, start=1):
        if not isinstance(document, Mapping):
            raise ConversionError(f"document {index}: expected a Kubernetes object (a mapping), got {type(document).__name__}")
        if document.get("kind") == "List" and isinstance(document.get("items"), list):
            converted_list = dict(document)
            converted_list["items"] = [convert(item, f"document {index} item {position}") for position, item in enumerate(document["items"], start=1)]
            conversion.documents.append(converted_list)
        else:
            conversion.documents.append(convert(document, f"document {index}"))
    return conversion


def convert_object(obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """One Karpenter NodePool, EC2NodeClass or NodeOverlay as read from the API server: the
    Joiner object and the warnings (each field dropped, as ``import-karpenter`` prints them).
    Raises :class:`ConversionError` with the reason when it is refused."""
    if (obj.get("apiVersion"), obj.get("kind")) not in (*_CONVERTED_KINDS, (KARPENTER_OVERLAY_API, "NodeOverlay")):
        raise ConversionError(f"{obj.get('kind')} {obj.get('apiVersion')} is not a Karpenter object Joiner converts")
    warnings: list[str] = []
    converted = _convert_one(obj, "", warnings)
    return dict(converted), warnings


def _convert_one(document: Any, where: str, warnings: list[str]) -> Any:
    """``where`` prefixes messages about the document as a whole (``"document 2: "``)."""
    if not isinstance(document, Mapping):
        raise ConversionError(f"{where}expected a Kubernetes object (a mapping), got {type(document).__name__}")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    converter: Callable[[_Context], dict[str, Any]] | None = None
    if kind == "NodePool" and api_version == KARPENTER_NODEPOOL_API:
        converter = _node_pool
    elif kind == "EC2NodeClass" and api_version == KARPENTER_NODECLASS_API:
        converter = _node_class
    elif kind == "NodeOverlay" and api_version == KARPENTER_OVERLAY_API:
        converter = _node_overlay
    elif isinstance(api_version, str) and api_version.split("/")[0] in ("karpenter.sh", "karpenter.k8s.aws") and kind in ("NodePool", "EC2NodeClass"):
        # Passed through, it would be an object Joiner never reads next to converted ones
        # pointing at it: a migration that launches nothing. Refused instead.
        raise ConversionError(
            f"{where}{kind} {api_version} is not converted (only {KARPENTER_NODEPOOL_API} NodePool and "
            f"{KARPENTER_NODECLASS_API} EC2NodeClass are): migrate to Karpenter v1 first, then import"
        )
    if converter is None:
        return document
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ConversionError(f"{where}{kind} has no metadata.name")
    problem = strict_problem(document)
    if problem is not None:
        raise ConversionError(f"{where}{kind} {name}: {problem[0]}: {problem[1]}")
    context = _Context(f"{kind} {name}", document, warnings)
    try:
        converted = converter(context)
    except _Unconvertible as reason:
        # Passed through, the NodePools converted to use it would name a NodeClass that does
        # not exist, or launch another AMI than the one asked for: refused.
        raise ConversionError(f"{context.label}: cannot be converted: {reason}") from None
    _check_output(context, converted)
    return converted


def _check_output(context: _Context, converted: Mapping[str, Any]) -> None:
    """Parse the converted object as ``joiner plan`` and the functions would: an object Joiner
    would reject is a refusal, never written."""
    from joiner.domain.snapshot import SnapshotError, parse_node_class, parse_node_overlay, parse_node_pool

    parsers: dict[str, Callable[[Mapping[str, Any]], object]] = {"NodePool": parse_node_pool, "NodeOverlay": parse_node_overlay}
    parse = parsers.get(str(converted.get("kind")), parse_node_class)
    try:
        parse(converted)
    except SnapshotError as error:
        raise ConversionError(f"{context.label}: Joiner would reject the converted object: {error}") from None


@dataclass
class _Context:
    """The object being converted: ``warn`` and ``fail`` name it and the field."""

    label: str
    document: Mapping[str, Any]
    warnings: list[str]

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{self.label}: {path}: {message}")

    def fail(self, path: str, message: str) -> NoReturn:
        raise ConversionError(f"{self.label}: {path}: {message}")

    def mapping(self, value: Any, path: str, *, required: bool = False) -> dict[str, Any]:
        if value is None:
            if required:
                self.fail(path, "is required")
            return {}
        if not isinstance(value, Mapping):
            self.fail(path, f"expected a mapping, got {type(value).__name__}")
        return dict(value)

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {type(value).__name__}")
        return value

    def drop_unknown(self, given: Mapping[str, Any], known: Iterable[str], path: str, why: str = "not supported by Joiner") -> None:
        for key in sorted(set(given) - set(known)):
            self.warn(f"{path}.{key}" if path else key, f"dropped ({why})")


def _metadata(context: _Context) -> dict[str, Any]:
    metadata = context.mapping(context.document.get("metadata"), "metadata")
    result: dict[str, Any] = {"name": metadata["name"]}
    labels = context.mapping(metadata.get("labels"), "metadata.labels")
    if labels:
        result["labels"] = labels
    annotations = {
        key: value
        for key, value in context.mapping(metadata.get("annotations"), "metadata.annotations").items()
        if not key.startswith(_DROPPED_ANNOTATION_PREFIXES)
    }
    if annotations:
        result["annotations"] = annotations
    return result


# ---------------------------------------------------------------- NodePool


_EKS_AUTO_PREFIX = "eks.amazonaws.com/"


def _requirement_key(key: str) -> str:
    if key.startswith(_EKS_AUTO_PREFIX + "instance-"):
        key = _AWS_INSTANCE_PREFIX + key[len(_EKS_AUTO_PREFIX + "instance-") :]  # EKS Auto Mode's names for the same labels
    elif key == _EKS_AUTO_PREFIX + "compute-type":
        return key
    if key in wk.KARPENTER_ALIASES:
        return wk.KARPENTER_ALIASES[key]
    if key.startswith(_AWS_INSTANCE_PREFIX):
        return "joiner.dev/instance-" + key[len(_AWS_INSTANCE_PREFIX) :]
    return key


def _requirements(context: _Context, value: Any, path: str) -> list[dict[str, Any]]:
    converted = []
    for index, item in enumerate(context.sequence(value, path)):
        item_path = f"{path}[{index}]"
        requirement = context.mapping(item, item_path)
        key = requirement.get("key")
        if not isinstance(key, str) or not key:
            context.fail(f"{item_path}.key", "is required")
        operator = requirement.get("operator")
        if not isinstance(operator, str) or not operator:
            context.fail(f"{item_path}.operator", "is required")
        joiner_key = _requirement_key(key)
        if joiner_key == wk.OS and requirement.get("operator") == "In" and "linux" not in [str(v) for v in requirement.get("values") or []]:
            raise _Unconvertible(
                f"{item_path} asks for {', '.join(str(v) for v in requirement.get('values') or [])} nodes; Joiner launches Linux (AL2023) only"
            )
        if key.startswith(_EKS_AUTO_PREFIX) and joiner_key.startswith("joiner.dev/"):
            context.warn(f"{item_path}.key", f"{key} (EKS Auto Mode) read as {joiner_key}")
        if key.startswith((*_KARPENTER_PREFIXES, _EKS_AUTO_PREFIX)) and joiner_key not in wk.WELL_KNOWN_LABELS:
            context.warn(
                f"{item_path}",
                f"requirement on {key} dropped: Joiner does not label nodes with it, so the pool may now allow instance types this requirement excluded",
            )
            continue
        if joiner_key in _PER_NODE_LABELS:
            context.warn(f"{item_path}", f"requirement on {key} dropped: Joiner sets {joiner_key} on each node")
            continue
        result: dict[str, Any] = {"key": joiner_key, "operator": operator}
        values = [str(v) for v in context.sequence(requirement.get("values"), f"{item_path}.values")]
        if joiner_key == wk.CAPACITY_TYPE and operator in ("In", "NotIn"):
            unsupported = [v for v in values if v not in _CAPACITY_TYPES]
            if unsupported:
                context.warn(f"{item_path}.values", f"capacity type(s) {', '.join(unsupported)} dropped (Joiner launches reserved, spot and on-demand)")
                values = [v for v in values if v in _CAPACITY_TYPES]
                if not values:
                    context.warn(item_path, "requirement dropped: no capacity type Joiner supports is left")
                    continue
        if values or "values" in requirement:
            result["values"] = values
        if requirement.get("minValues") is not None:
            result["minValues"] = requirement["minValues"]
        context.drop_unknown(requirement, ("key", "operator", "values", "minValues"), item_path)
        converted.append(result)
    return converted


def _taints(context: _Context, value: Any, path: str) -> list[dict[str, Any]]:
    taints: list[dict[str, Any]] = []
    for index, item in enumerate(context.sequence(value, path)):
        taint = context.mapping(item, f"{path}[{index}]")
        taints.append({key: taint[key] for key in ("key", "value", "effect") if key in taint})  # timeAdded is runtime state
    return taints


def _node_pool(context: _Context) -> dict[str, Any]:
    spec = context.mapping(context.document.get("spec"), "spec", required=True)
    template = context.mapping(spec.get("template"), "spec.template", required=True)
    template_metadata = context.mapping(template.get("metadata"), "spec.template.metadata")
    template_spec = context.mapping(template.get("spec"), "spec.template.spec", required=True)

    out_template_metadata: dict[str, Any] = {}
    labels = context.mapping(template_metadata.get("labels"), "spec.template.metadata.labels")
    for key in sorted(labels):
        if wk.normalize_label_key(key) in _PER_NODE_LABELS:
            context.warn(f"spec.template.metadata.labels.{key}", "dropped (Joiner sets it on each node)")
            del labels[key]
    if labels:
        out_template_metadata["labels"] = labels
    annotations = context.mapping(template_metadata.get("annotations"), "spec.template.metadata.annotations")
    if annotations:
        out_template_metadata["annotations"] = annotations

    ref = context.mapping(template_spec.get("nodeClassRef"), "spec.template.spec.nodeClassRef", required=True)
    ref_name = ref.get("name")
    if not isinstance(ref_name, str) or not ref_name:
        context.fail("spec.template.spec.nodeClassRef.name", "is required")
    if ref.get("group") == "eks.amazonaws.com":
        raise _Unconvertible(
            "an EKS Auto Mode NodePool (nodeClassRef eks.amazonaws.com/NodeClass): its NodeClass has no "
            "Joiner equivalent; write a karpenter.k8s.aws/v1 EC2NodeClass for it and point the NodePool at that"
        )
    if (ref.get("group"), ref.get("kind")) not in (("karpenter.k8s.aws", "EC2NodeClass"), (None, None)):
        raise _Unconvertible(f"spec.template.spec.nodeClassRef names {ref.get('group')}/{ref.get('kind')}, not a karpenter.k8s.aws EC2NodeClass")
    out_spec: dict[str, Any] = {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": ref_name}}
    requirements = _requirements(context, template_spec.get("requirements"), "spec.template.spec.requirements")
    if requirements:
        out_spec["requirements"] = requirements
    for taint_field in ("taints", "startupTaints"):
        taints = _taints(context, template_spec.get(taint_field), f"spec.template.spec.{taint_field}")
        if taints:
            out_spec[taint_field] = taints
    for duration_field in ("expireAfter", "terminationGracePeriod"):
        if template_spec.get(duration_field) is not None:
            out_spec[duration_field] = template_spec[duration_field]
    context.drop_unknown(
        template_spec, ("nodeClassRef", "requirements", "taints", "startupTaints", "expireAfter", "terminationGracePeriod"), "spec.template.spec"
    )
    context.drop_unknown(template, ("metadata", "spec"), "spec.template")

    template_out: dict[str, Any] = {}
    if out_template_metadata:
        template_out["metadata"] = out_template_metadata
    template_out["spec"] = out_spec
    out: dict[str, Any] = {"template": template_out}

    if spec.get("disruption") is not None:
        disruption = context.mapping(spec["disruption"], "spec.disruption")
        out_disruption = {key: copy.deepcopy(disruption[key]) for key in ("consolidationPolicy", "consolidateAfter", "budgets") if key in disruption}
        context.drop_unknown(disruption, ("consolidationPolicy", "consolidateAfter", "budgets"), "spec.disruption")
        if out_disruption:
            out["disruption"] = out_disruption
    if spec.get("limits") is not None:
        out["limits"] = copy.deepcopy(context.mapping(spec["limits"], "spec.limits"))
    if spec.get("weight") is not None:
        out["weight"] = spec["weight"]
    if spec.get("replicas") is not None:  # a static NodePool (Karpenter's StaticCapacity)
        out["replicas"] = spec["replicas"]
    context.drop_unknown(spec, ("template", "disruption", "limits", "weight", "replicas"), "spec")
    return {"apiVersion": JOINER_API, "kind": "NodePool", "metadata": _metadata(context), "spec": out}


# ---------------------------------------------------------------- NodeClass


def _selector_terms(context: _Context, value: Any, path: str, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    terms = []
    for index, item in enumerate(context.sequence(value, path)):
        term_path = f"{path}[{index}]"
        term = context.mapping(item, term_path)
        kept = {key: copy.deepcopy(term[key]) for key in fields if key in term}
        context.drop_unknown(term, fields, term_path)
        if not kept:
            context.warn(term_path, "term dropped: none of its fields is supported by Joiner")
            continue
        terms.append(kept)
    return terms


def _restricted_tag(key: str) -> bool:
    return key.startswith("kubernetes.io/cluster/") or key in (
        "joiner.dev/cluster",
        wk.NODEPOOL,
        wk.NODECLAIM,
        wk.MANAGED_BY_TAG,
        "eks:eks-cluster-name",
        "karpenter.sh/nodepool",
        "karpenter.sh/nodeclaim",
        "karpenter.k8s.aws/ec2nodeclass",
    )


def _node_class(context: _Context) -> dict[str, Any]:
    spec = context.mapping(context.document.get("spec"), "spec", required=True)
    out: dict[str, Any] = {}

    for index, term in enumerate(context.sequence(spec.get("amiSelectorTerms"), "spec.amiSelectorTerms")):
        if isinstance(term, Mapping) and "ssmParameter" in term:
            raise _Unconvertible(
                f"spec.amiSelectorTerms[{index}].ssmParameter {term['ssmParameter']!r}: Joiner cannot resolve AMIs from an "
                "SSM parameter; select the AMI by id, name or tags, or use al2023@latest"
            )
    ami_terms = _selector_terms(context, spec.get("amiSelectorTerms"), "spec.amiSelectorTerms", ("alias", "id", "name", "owner", "tags"))
    family = spec.get("amiFamily")
    aliases = [term["alias"] for term in ami_terms if "alias" in term]
    if family == "Custom":
        # In Karpenter, Custom means spec.userData is the node's whole bootstrap (an alias then
        # only finds the AMI); Joiner always bootstraps its nodes itself and merges userData
        # into that, so reading the class as the alias's family would change what runs.
        selected = f"with alias {aliases[0]!r}" if aliases else "with AMIs selected by id, name or tags"
        bootstrap = "spec.userData" if spec.get("userData") is not None else "no userData (the node gets no bootstrap)"
        raise _Unconvertible(
            f"spec.amiFamily 'Custom' {selected}: Karpenter then uses {bootstrap} as the node's whole bootstrap and adds none "
            "of its own; Joiner always bootstraps AL2023 nodes with its own nodeadm settings and merges userData into them, "
            "so this cannot be converted faithfully. Drop amiFamily: Custom and keep in userData only what adds to the "
            "bootstrap (a nodeadm NodeConfig part or a script), or keep this EC2NodeClass on Karpenter"
        )
    if aliases:
        alias_family = str(aliases[0]).partition("@")[0]
        if alias_family not in _AMI_ALIAS_FAMILIES:
            raise _Unconvertible(f"spec.amiSelectorTerms alias {aliases[0]!r} (Joiner supports {', '.join(sorted(_AMI_ALIAS_FAMILIES))} aliases)")
        family = _AMI_ALIAS_FAMILIES[alias_family]
    if family is not None and family not in _AMI_FAMILIES:
        raise _Unconvertible(f"spec.amiFamily {family!r} (Joiner launches AL2023, and converts AL2 and Bottlerocket to it)")
    if family not in (None, "AL2023"):
        if aliases:
            context.warn("spec.amiSelectorTerms[0].alias", f"{aliases[0]} replaced by al2023@latest (Joiner launches AL2023 only)")
            ami_terms = [{"alias": "al2023@latest"}]
        elif ami_terms:
            raise _Unconvertible(f"spec.amiSelectorTerms select {family} AMIs by id, name or tags (Joiner launches AL2023 only)")
        context.warn("spec.amiFamily", f"{family} replaced by AL2023 (Joiner launches AL2023 only; AL2 is end-of-life, Bottlerocket not supported)")
        if family == "Bottlerocket" and spec.get("userData") is not None:
            context.warn("spec.userData", "dropped (Bottlerocket TOML settings do not apply to AL2023)")
            spec = {key: value for key, value in spec.items() if key != "userData"}
    if family is not None:
        out["amiFamily"] = "AL2023"
    if ami_terms:
        out["amiSelectorTerms"] = ami_terms
    for terms_field, fields in (("subnetSelectorTerms", ("id", "tags")), ("securityGroupSelectorTerms", ("id", "name", "tags"))):
        terms = _selector_terms(context, spec.get(terms_field), f"spec.{terms_field}", fields)
        if not terms:
            context.fail(f"spec.{terms_field}", "is required (at least one term Joiner supports)")
        out[terms_field] = terms
    if spec.get("capacityReservationSelectorTerms") is not None:
        reservations = _selector_terms(context, spec["capacityReservationSelectorTerms"], "spec.capacityReservationSelectorTerms", ("id", "tags", "ownerID"))
        if reservations:
            out["capacityReservationSelectorTerms"] = reservations
    for identity in ("role", "instanceProfile"):
        if spec.get(identity) is not None:
            out[identity] = spec[identity]
    if "role" in out:
        context.warn(
            "spec.role",
            f"{out['role']}: Joiner may only pass the node role of its stack to EC2 and needs an instance "
            "profile of the same name; deploy Joiner with -c nodeRoleArn=<this role's ARN> or use its role",
        )
    if spec.get("kubelet") is not None:
        kubelet = context.mapping(spec["kubelet"], "spec.kubelet")
        context.drop_unknown(kubelet, _KUBELET_FIELDS, "spec.kubelet")
        kept = {key: copy.deepcopy(kubelet[key]) for key in _KUBELET_FIELDS if key in kubelet}
        if kept:
            out["kubelet"] = kept
    mappings = []
    for index, item in enumerate(context.sequence(spec.get("blockDeviceMappings"), "spec.blockDeviceMappings")):
        path = f"spec.blockDeviceMappings[{index}]"
        mapping = context.mapping(item, path)
        converted: dict[str, Any] = {key: copy.deepcopy(mapping[key]) for key in ("deviceName", "rootVolume") if key in mapping}
        if mapping.get("ebs") is not None:
            ebs = context.mapping(mapping["ebs"], f"{path}.ebs")
            context.drop_unknown(ebs, _EBS_FIELDS, f"{path}.ebs")
            converted["ebs"] = {key: ebs[key] for key in _EBS_FIELDS if key in ebs}
        context.drop_unknown(mapping, ("deviceName", "rootVolume", "ebs"), path)
        mappings.append(converted)
    if mappings:
        out["blockDeviceMappings"] = mappings
    tags = context.mapping(spec.get("tags"), "spec.tags")
    for key in sorted(tags):
        if _restricted_tag(key):
            context.warn(f"spec.tags.{key}", "dropped (Joiner sets this tag itself)")
            del tags[key]
    if tags:
        out["tags"] = tags
    if spec.get("metadataOptions") is not None:
        options = context.mapping(spec["metadataOptions"], "spec.metadataOptions")
        context.drop_unknown(options, _METADATA_OPTIONS, "spec.metadataOptions")
        out["metadataOptions"] = {key: options[key] for key in _METADATA_OPTIONS if key in options}
    if spec.get("userData") is not None:
        out["userData"] = spec["userData"]
    if spec.get("instanceStorePolicy") is not None:
        if spec["instanceStorePolicy"] != "RAID0":
            context.fail("spec.instanceStorePolicy", f"{spec['instanceStorePolicy']!r} is not RAID0, the one policy Karpenter and Joiner know")
        out["instanceStorePolicy"] = "RAID0"
    context.drop_unknown(
        spec,
        (
            "amiFamily",
            "amiSelectorTerms",
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "role",
            "instanceProfile",
            "kubelet",
            "blockDeviceMappings",
            "tags",
            "metadataOptions",
            "userData",
            "capacityReservationSelectorTerms",
            "instanceStorePolicy",
        ),
        "spec",
    )
    return {"apiVersion": JOINER_API, "kind": "NodeClass", "metadata": _metadata(context), "spec": out}


# ---------------------------------------------------------------- NodeOverlay


def _node_overlay(context: _Context) -> dict[str, Any]:
    """``karpenter.sh/v1alpha1`` NodeOverlay -> ``joiner.dev/v1alpha1``: requirement keys renamed
    as a NodePool's are; a requirement on a label Joiner does not set is refused, not dropped
    (dropping it would widen the overlay to instance types it did not select)."""
    spec = context.mapping(context.document.get("spec"), "spec", required=True)
    requirements = []
    for index, item in enumerate(context.sequence(spec.get("requirements"), "spec.requirements")):
        path = f"spec.requirements[{index}]"
        requirement = context.mapping(item, path)
        key = requirement.get("key")
        if not isinstance(key, str) or not key:
            context.fail(f"{path}.key", "is required")
        joiner_key = _requirement_key(key)
        if key.startswith((*_KARPENTER_PREFIXES, _EKS_AUTO_PREFIX)) and joiner_key not in wk.WELL_KNOWN_LABELS:
            raise _Unconvertible(f"{path} selects on {key}, a label Joiner does not set: without it the overlay would select instance types it did not")
        converted: dict[str, Any] = {"key": joiner_key}
        converted.update((k, copy.deepcopy(requirement[k])) for k in ("operator", "values") if k in requirement)
        context.drop_unknown(requirement, ("key", "operator", "values"), path)
        requirements.append(converted)
    out: dict[str, Any] = {"requirements": requirements}
    for name in ("price", "priceAdjustment", "capacity", "weight"):
        if spec.get(name) is not None:
            out[name] = copy.deepcopy(spec[name])
    context.drop_unknown(spec, ("requirements", "price", "priceAdjustment", "capacity", "weight"), "spec")
    return {"apiVersion": JOINER_OVERLAY_API, "kind": "NodeOverlay", "metadata": _metadata(context), "spec": out}


# ---------------------------------------------------------------- Karpenter's objects in the cluster


#: The condition Joiner writes on each Karpenter NodePool and EC2NodeClass it is asked to read.
CONDITION_TYPE = "JoinerConverted"
#: Where a converted object came from (an annotation on the object Joiner plans with).
READ_FROM_ANNOTATION = "joiner.dev/read-from"
#: Karpenter's condition messages may be 32,768 characters; Joiner's stay readable.
MESSAGE_LIMIT = 4000


class ReadReason(StrEnum):
    """Why a Karpenter object is or is not read (the condition's reason)."""

    CONVERTED = "Converted"
    CONVERTED_WITH_DROPS = "ConvertedWithDrops"
    REFUSED = "ConversionRefused"
    SHADOWED = "ShadowedByJoiner"
    NODE_CLASS_NOT_READ = "NodeClassNotRead"


@dataclass(frozen=True, slots=True)
class ReadOutcome:
    """What became of one Karpenter object: ``kind`` is ``NodePool`` or ``EC2NodeClass``."""

    kind: str
    name: str
    reason: ReadReason
    message: str

    @property
    def read(self) -> bool:
        return self.reason in (ReadReason.CONVERTED, ReadReason.CONVERTED_WITH_DROPS)


@dataclass(frozen=True, slots=True)
class KarpenterView:
    """Joiner's NodePools and NodeClasses with the Karpenter ones converted beside them, and
    the outcome for every Karpenter object."""

    node_pools: tuple[dict[str, Any], ...]
    node_classes: tuple[dict[str, Any], ...]
    outcomes: tuple[ReadOutcome, ...]


def _name_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""


def _as_read(original: Mapping[str, Any], converted: dict[str, Any]) -> dict[str, Any]:
    """The converted object as Joiner plans with it: where it came from, the original's
    generation, deletion and status (Joiner's status writes keep the conditions in it). Not its
    uid: a NodeClaim's owner reference would then name a joiner.dev NodePool that does not exist."""
    metadata = dict(converted["metadata"])
    original_meta = original.get("metadata") if isinstance(original.get("metadata"), Mapping) else {}
    assert isinstance(original_meta, Mapping)
    metadata["annotations"] = {**(metadata.get("annotations") or {}), READ_FROM_ANNOTATION: f"{original.get('apiVersion')} {original.get('kind')}"}
    for key in ("generation", "deletionTimestamp", "creationTimestamp"):
        if original_meta.get(key) is not None:
            metadata[key] = original_meta[key]
    result = {**converted, "metadata": metadata}
    if isinstance(original.get("status"), Mapping):
        result["status"] = copy.deepcopy(dict(original["status"]))
    return result


def _converted_message(kind: str, name: str, warnings: list[str]) -> tuple[ReadReason, str]:
    target = "joiner.dev/v1 NodePool" if kind == "NodePool" else "joiner.dev/v1 NodeClass"
    if not warnings:
        return ReadReason.CONVERTED, f"read by Joiner as {target} {name}"
    label = f"{kind} {name}: "
    drops = "; ".join(w[len(label) :] if w.startswith(label) else w for w in warnings)
    return ReadReason.CONVERTED_WITH_DROPS, f"read by Joiner as {target} {name}, with these differences: {drops}"


def read_karpenter(
    joiner_pools: Iterable[Mapping[str, Any]],
    joiner_classes: Iterable[Mapping[str, Any]],
    karpenter_pools: Iterable[Mapping[str, Any]],
    karpenter_classes: Iterable[Mapping[str, Any]],
) -> KarpenterView:
    """Karpenter's ``karpenter.sh/v1`` NodePools and ``karpenter.k8s.aws/v1`` EC2NodeClasses as
    Joiner reads them, converted as ``joiner import-karpenter`` converts them:

    * a Karpenter object Joiner's own object of the same name shadows is not read (Joiner's wins);
    * one the conversion refuses is not read, with the refusal as the reason;
    * a NodePool is read only with its EC2NodeClass: one whose class is missing, refused or
      shadowed is not read (it would launch from another class than the one it names);
    * every outcome, read or not, is returned for the object's ``JoinerConverted`` condition,
      and a read one's message lists every field the conversion dropped."""
    pools = [dict(p) for p in joiner_pools]
    classes = [dict(c) for c in joiner_classes]
    pool_names = {_name_of(p) for p in pools}
    class_names = {_name_of(c) for c in classes}
    outcomes: list[ReadOutcome] = []
    read_classes: dict[str, ReadOutcome] = {}
    for original in sorted(karpenter_classes, key=_name_of):
        name = _name_of(original)
        if name in class_names:
            outcome = ReadOutcome("EC2NodeClass", name, ReadReason.SHADOWED, f"Joiner reads its own joiner.dev/v1 NodeClass {name} instead")
        else:
            try:
                converted, warnings = convert_object(original)
            except ConversionError as error:
                outcome = ReadOutcome("EC2NodeClass", name, ReadReason.REFUSED, str(error)[:MESSAGE_LIMIT])
            else:
                reason, message = _converted_message("EC2NodeClass", name, warnings)
                outcome = ReadOutcome("EC2NodeClass", name, reason, message[:MESSAGE_LIMIT])
                classes.append(_as_read(original, converted))
        read_classes[name] = outcome
        outcomes.append(outcome)
    for original in sorted(karpenter_pools, key=_name_of):
        name = _name_of(original)
        if name in pool_names:
            outcomes.append(ReadOutcome("NodePool", name, ReadReason.SHADOWED, f"Joiner reads its own joiner.dev/v1 NodePool {name} instead"))
            continue
        try:
            converted, warnings = convert_object(original)
        except ConversionError as error:
            outcomes.append(ReadOutcome("NodePool", name, ReadReason.REFUSED, str(error)[:MESSAGE_LIMIT]))
            continue
        class_name = str(converted["spec"]["template"]["spec"]["nodeClassRef"]["name"])
        class_outcome = read_classes.get(class_name)
        if class_outcome is None or not class_outcome.read:
            why = "does not exist" if class_outcome is None else f"is not read ({class_outcome.reason}: {class_outcome.message})"
            outcomes.append(ReadOutcome("NodePool", name, ReadReason.NODE_CLASS_NOT_READ, f"its EC2NodeClass {class_name} {why}"[:MESSAGE_LIMIT]))
            continue
        reason, message = _converted_message("NodePool", name, warnings)
        outcomes.append(ReadOutcome("NodePool", name, reason, message[:MESSAGE_LIMIT]))
        pools.append(_as_read(original, converted))
    return KarpenterView(tuple(pools), tuple(classes), tuple(outcomes))


def conversion_conditions(outcome: ReadOutcome, current: Mapping[str, Any] | None, stamp: str) -> list[dict[str, Any]] | None:
    """The object's ``status.conditions`` with its ``JoinerConverted`` condition set to
    ``outcome`` (the others kept as they are), or None when it already says that. ``stamp``
    is now (RFC 3339): the transition time, kept while the status holds."""
    status = current.get("status") if current is not None else None
    conditions = [c for c in (status.get("conditions") or [] if isinstance(status, Mapping) else []) if isinstance(c, Mapping)]
    previous = next((c for c in conditions if c.get("type") == CONDITION_TYPE), None)
    wanted: dict[str, Any] = {"type": CONDITION_TYPE, "status": "True" if outcome.read else "False", "reason": str(outcome.reason), "message": outcome.message}
    metadata = current.get("metadata") if current is not None else None
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    if isinstance(generation, int):
        wanted["observedGeneration"] = generation
    if previous is not None and all(previous.get(key) == value for key, value in wanted.items()):
        return None
    kept = previous.get("lastTransitionTime") if previous is not None and previous.get("status") == wanted["status"] else None
    wanted["lastTransitionTime"] = kept or stamp
    return [*(dict(c) for c in conditions if c.get("type") != CONDITION_TYPE), wanted]
