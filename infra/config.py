"""Joiner's deployment settings: one validated value object, read from CDK context or props.

Every setting has a context key (``cdk deploy -c clusterName=prod``) and a keyword of
:class:`JoinerConfig`; ``docs/infra.md`` has the reference table. Validation happens
here, before any construct exists, so a typo fails synth with one line naming the key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigError", "INTERFACE_ENDPOINTS", "VPC_ENDPOINT_MODES", "JoinerConfig", "RETENTION_DAY_NAMES", "CONTEXT_KEYS", "created_node_role_name"]

#: CloudWatch Logs retention periods (days) -> aws_logs.RetentionDays member name.
RETENTION_DAY_NAMES: dict[int, str] = {
    1: "ONE_DAY",
    3: "THREE_DAYS",
    5: "FIVE_DAYS",
    7: "ONE_WEEK",
    14: "TWO_WEEKS",
    30: "ONE_MONTH",
    60: "TWO_MONTHS",
    90: "THREE_MONTHS",
    120: "FOUR_MONTHS",
    150: "FIVE_MONTHS",
    180: "SIX_MONTHS",
    365: "ONE_YEAR",
    400: "THIRTEEN_MONTHS",
    545: "EIGHTEEN_MONTHS",
    731: "TWO_YEARS",
    1096: "THREE_YEARS",
    1827: "FIVE_YEARS",
    2192: "SIX_YEARS",
    2557: "SEVEN_YEARS",
    2922: "EIGHT_YEARS",
    3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}

#: context key -> JoinerConfig field
CONTEXT_KEYS: dict[str, str] = {
    "clusterName": "cluster_name",
    "region": "region",
    "vpcId": "vpc_id",
    "subnetIds": "subnet_ids",
    "securityGroupId": "security_group_id",
    "vpcEndpoints": "vpc_endpoints",
    "scannerMode": "scanner_mode",
    "logRetentionDays": "log_retention_days",
    "alarmEmail": "alarm_email",
    "alarmTopicArn": "alarm_topic_arn",
    "nodeRoleArn": "node_role_arn",
    "ebsKmsKeyArn": "ebs_kms_key_arn",
    "createAccessEntry": "create_access_entry",
    "readKarpenterCrds": "read_karpenter_crds",
    "dashboard": "dashboard_enabled",
    "dashboardName": "dashboard_name",
    "logLevel": "log_level",
    "pendingPodAgeAlarmSeconds": "pending_pod_age_alarm_seconds",
    "capacityErrorsAlarmThreshold": "capacity_errors_alarm_threshold",
    "interruptionQueueAgeAlarmSeconds": "interruption_queue_age_alarm_seconds",
}

#: Integer settings: context key -> (smallest, largest) accepted value.
_INTEGER_BOUNDS: dict[str, tuple[int, int]] = {
    "pendingPodAgeAlarmSeconds": (60, 86_400),
    "capacityErrorsAlarmThreshold": (0, 100_000),
    # A spot warning gives 120 s: an alarm later than that can only report a reclaim.
    "interruptionQueueAgeAlarmSeconds": (5, 110),
}

# EKS: 1-100 characters, alphanumerics, hyphens and underscores, starting alphanumeric.
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8,17}$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]{1,128}$")
_DASHBOARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/(?:[\w+=,.@-]+/)*([\w+=,.@-]{1,64})$")


#: IAM names are at most 64 characters; room is kept for the longest region name (15).
_IAM_NAME_MAX = 64
_REGION_NAME_MAX = 15
_NODE_ROLE_PREFIX = "JoinerNodeRole-"


def created_node_role_name(cluster_name: str, region: str) -> str:
    """``JoinerNodeRole-<cluster>-<region>``: IAM role and instance profile names are
    account-wide, so the stacks of one cluster name in two regions need two names. ``region``
    may be a CDK token (an environment-agnostic stack). A cluster name too long to fit is cut
    and ends in 8 hex digits of its SHA-256, so two long names stay apart."""
    room = _IAM_NAME_MAX - len(_NODE_ROLE_PREFIX) - 1 - _REGION_NAME_MAX
    cluster = cluster_name
    if len(cluster) > room:
        cluster = f"{cluster[: room - 9]}-{hashlib.sha256(cluster_name.encode()).hexdigest()[:8]}"
    return f"{_NODE_ROLE_PREFIX}{cluster}-{region}"


VPC_ENDPOINT_MODES = ("create", "existing")
#: The AWS APIs the functions call (joiner.adapters.aws and the handlers) that have interface
#: endpoints: ``lambda`` is the watcher's wake-up of the scanner (responsive mode), ``xray`` the
#: traces. DynamoDB is reached through a gateway endpoint (route tables, not subnets); the Price
#: List API has endpoints in three regions only (without it: the bundled prices).
INTERFACE_ENDPOINTS: tuple[str, ...] = ("ec2", "ssm", "eks", "sqs", "sts", "lambda", "xray")


class ConfigError(ValueError):
    """A missing or malformed Joiner setting; the message names the context key."""


@dataclass(frozen=True, slots=True)
class JoinerConfig:
    """Validated settings for one Joiner deployment (one EKS cluster).

    ``region`` only selects the stack's region (:class:`infra.stack.JoinerStack`); the
    :class:`infra.joiner.Joiner` construct always uses the region of the stack it is in.
    """

    cluster_name: str
    region: str | None = None
    vpc_id: str | None = None
    subnet_ids: tuple[str, ...] = ()
    security_group_id: str | None = None
    #: In a VPC: ``create`` (the stack creates the interface endpoints the functions call) or
    #: ``existing`` (NAT, or endpoints of your own for every service in ``INTERFACE_ENDPOINTS``).
    vpc_endpoints: str | None = None
    scanner_mode: str = "responsive"
    log_retention_days: int = 30
    alarm_email: str | None = None
    alarm_topic_arn: str | None = None
    node_role_arn: str | None = None
    #: The customer-managed key that encrypts the nodes' EBS volumes (a NodeClass's ``kmsKeyID``
    #: or the account's default EBS key): the launching roles get the grants EC2 needs.
    ebs_kms_key_arn: str | None = None
    create_access_entry: bool = True
    #: The functions also read Karpenter's v1 NodePools and EC2NodeClasses (``JOINER_KARPENTER_CRDS``;
    #: apply manifests/rbac-karpenter.yaml too).
    read_karpenter_crds: bool = False
    #: The functions' log level (POWERTOOLS_LOG_LEVEL).
    log_level: str = "INFO"
    #: Whether this stack creates a CloudWatch dashboard ($3 a month each beyond the account's
    #: three free ones); giving ``dashboard_name`` turns it on.
    dashboard_enabled: bool = False
    #: The CloudWatch dashboard's name (default ``Joiner-<cluster>``; unique per account and region).
    dashboard_name: str | None = None
    pending_pod_age_alarm_seconds: int = 300
    capacity_errors_alarm_threshold: int = 10
    interruption_queue_age_alarm_seconds: int = 30

    def __post_init__(self) -> None:
        def fail(key: str, message: str) -> None:
            raise ConfigError(f"context {key!r}: {message}")

        if not isinstance(self.cluster_name, str) or not self.cluster_name:
            fail("clusterName", "is required (cdk deploy -c clusterName=<your EKS cluster>)")
        if not _CLUSTER_NAME.match(self.cluster_name):
            fail("clusterName", f"{self.cluster_name!r} is not a valid EKS cluster name")
        if self.region is not None and not _REGION.match(self.region):
            fail("region", f"{self.region!r} is not an AWS region name such as us-east-1")
        if self.vpc_id is not None and not _VPC_ID.match(self.vpc_id):
            fail("vpcId", f"{self.vpc_id!r} is not a VPC id (vpc-...)")
        for subnet_id in self.subnet_ids:
            if not _SUBNET_ID.match(subnet_id):
                fail("subnetIds", f"{subnet_id!r} is not a subnet id (subnet-...)")
        if self.subnet_ids and self.vpc_id is None:
            fail("subnetIds", "needs vpcId too")
        if self.vpc_id is not None and not self.subnet_ids:
            fail("vpcId", "needs subnetIds (the private subnets the functions run in)")
        if len(set(self.subnet_ids)) != len(self.subnet_ids):
            fail("subnetIds", "lists a subnet twice")
        if self.security_group_id is not None:
            if not _SECURITY_GROUP_ID.match(self.security_group_id):
                fail("securityGroupId", f"{self.security_group_id!r} is not a security group id (sg-...)")
            if self.vpc_id is None:
                fail("securityGroupId", "needs vpcId and subnetIds too")
        if self.vpc_endpoints is not None and self.vpc_endpoints not in VPC_ENDPOINT_MODES:
            fail("vpcEndpoints", f"must be 'create' or 'existing', got {self.vpc_endpoints!r}")
        if self.vpc_endpoints is not None and self.vpc_id is None:
            fail("vpcEndpoints", "needs vpcId and subnetIds too")
        if self.vpc_id is not None and self.vpc_endpoints is None:
            fail(
                "vpcEndpoints",
                "in a VPC, say how the functions reach AWS APIs: 'create' (the stack creates interface "
                f"endpoints for {', '.join(self.interface_endpoints_needed)}) or 'existing' (NAT, or endpoints of yours for "
                "all of them; the watcher wakes the scanner through lambda); the DynamoDB gateway endpoint is yours in both",
            )
        if self.scanner_mode not in ("responsive", "economy"):
            fail("scannerMode", f"must be 'responsive' or 'economy', got {self.scanner_mode!r}")
        if isinstance(self.log_retention_days, bool) or self.log_retention_days not in RETENTION_DAY_NAMES:
            allowed = ", ".join(str(days) for days in sorted(RETENTION_DAY_NAMES))
            fail("logRetentionDays", f"must be one of {allowed}; got {self.log_retention_days!r}")
        if self.alarm_email is not None and self.alarm_topic_arn is not None:
            fail("alarmEmail", "give either alarmEmail (a new topic) or alarmTopicArn (an existing topic), not both")
        if self.alarm_email is not None and not _EMAIL.match(self.alarm_email):
            fail("alarmEmail", f"{self.alarm_email!r} is not an e-mail address")
        if self.alarm_topic_arn is not None and not _TOPIC_ARN.match(self.alarm_topic_arn):
            fail("alarmTopicArn", f"{self.alarm_topic_arn!r} is not an SNS topic ARN")
        if self.node_role_arn is not None and not _ROLE_ARN.match(self.node_role_arn):
            fail("nodeRoleArn", f"{self.node_role_arn!r} is not an IAM role ARN")
        if self.ebs_kms_key_arn is not None and not _KMS_KEY_ARN.match(self.ebs_kms_key_arn):
            fail("ebsKmsKeyArn", f"{self.ebs_kms_key_arn!r} is not a KMS key ARN (arn:aws:kms:<region>:<account>:key/<id>; not an alias)")
        if not isinstance(self.create_access_entry, bool):
            fail("createAccessEntry", f"must be true or false, got {self.create_access_entry!r}")
        if not isinstance(self.read_karpenter_crds, bool):
            fail("readKarpenterCrds", f"must be true or false, got {self.read_karpenter_crds!r}")
        if not isinstance(self.dashboard_enabled, bool):
            fail("dashboard", f"must be true or false, got {self.dashboard_enabled!r}")
        if self.log_level not in LOG_LEVELS:
            fail("logLevel", f"must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.dashboard_name is not None and not _DASHBOARD_NAME.match(self.dashboard_name):
            fail("dashboardName", f"{self.dashboard_name!r} is not a dashboard name (1-255 letters, digits, '-' and '_')")
        for key, (smallest, largest) in _INTEGER_BOUNDS.items():
            value = getattr(self, CONTEXT_KEYS[key])
            if isinstance(value, bool) or not isinstance(value, int) or not smallest <= value <= largest:
                fail(key, f"must be a whole number from {smallest} to {largest}, got {value!r}")

    @property
    def dashboard(self) -> str | None:
        """The dashboard's name (``dashboard_name`` or ``Joiner-<cluster>``), None when this
        stack creates none."""
        if not (self.dashboard_enabled or self.dashboard_name):
            return None
        return self.dashboard_name or f"Joiner-{self.cluster_name}"

    @property
    def existing_node_role_name(self) -> str | None:
        """The last path segment of ``node_role_arn``; None when the stack creates the role
        (:func:`created_node_role_name`)."""
        if self.node_role_arn is None:
            return None
        match = _ROLE_ARN.match(self.node_role_arn)
        assert match is not None  # validated in __post_init__
        return match.group(1)

    @property
    def interface_endpoints_needed(self) -> tuple[str, ...]:
        """The AWS APIs the functions call through interface endpoints (no NAT), for this mode."""
        return tuple(name for name in INTERFACE_ENDPOINTS if name != "lambda" or self.scanner_mode == "responsive")

    @property
    def in_vpc(self) -> bool:
        return self.vpc_id is not None

    @classmethod
    def from_context(cls, get: Any) -> JoinerConfig:
        """Build from CDK context; ``get`` is ``node.try_get_context`` (or a dict's ``get``).

        Values given on the command line arrive as strings (``-c subnetIds=a,b``,
        ``-c createAccessEntry=false``); values from cdk.json keep their JSON types.
        """
        values: dict[str, Any] = {}
        for key, attribute in CONTEXT_KEYS.items():
            raw = get(key)
            if raw is None or raw == "":
                continue
            values[attribute] = _coerce(key, raw)
        if "cluster_name" not in values:
            raise ConfigError("context 'clusterName': is required (cdk deploy -c clusterName=<your EKS cluster>)")
        return cls(**values)


def _coerce(key: str, raw: Any) -> Any:
    """Context values as the fields want them; strings from ``-c key=value`` are parsed."""
    if key == "subnetIds":
        if isinstance(raw, str):
            text = raw.strip()
            if text.startswith("["):
                try:
                    raw = json.loads(text)
                except json.JSONDecodeError:
                    raise ConfigError(f"context 'subnetIds': {raw!r} is neither JSON nor a comma-separated list") from None
            else:
                raw = [part.strip() for part in text.split(",") if part.strip()]
        if not isinstance(raw, Sequence) or isinstance(raw, str) or not all(isinstance(item, str) for item in raw):
            raise ConfigError(f"context 'subnetIds': must be a list of subnet ids, got {raw!r}")
        return tuple(raw)
    if key == "logRetentionDays" or key in _INTEGER_BOUNDS:
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                raise ConfigError(f"context {key!r}: {raw!r} is not a whole number") from None
        return raw
    if key == "logLevel" and isinstance(raw, str):
        return raw.strip().upper()
    if key in ("createAccessEntry", "dashboard", "readKarpenterCrds"):
        if isinstance(raw, str):
            lowered = raw.strip().lower()
            if lowered in ("true", "yes", "1"):
                return True
            if lowered in ("false", "no", "0"):
                return False
            raise ConfigError(f"context {key!r}: must be true or false, got {raw!r}")
        return raw
    if not isinstance(raw, str):
        raise ConfigError(f"context {key!r}: must be a string, got {raw!r}")
    return raw.strip()
