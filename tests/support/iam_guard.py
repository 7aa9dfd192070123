"""The IAM guard: every AWS request a Lambda handler makes in the test suite (and in the
simulator it runs) is evaluated against that function's role policies in the synthesized
CDK template, as IAM would evaluate it in a real deployment.

Capture: every botocore client gets a ``before-parameter-build`` hook (operation and the
caller's parameters). A request is attributed to a function while that function's handler
runs (:func:`testworld.lambdas.current_invocation`, a context variable set by the
handler wrapper of ``load_handler``; thread pools copy the caller's context, see
:func:`install`). Requests outside handlers (test setup, the simulator's own bookkeeping)
are not a function's and are not evaluated.

Policies: the template is synthesized once per cluster name with a sentinel cluster, and
the sentinel replaced by the running function's cluster; ``Ref``/``Fn::GetAtt`` of the
tables and queues resolve to the names in the function's settings, mapped through the
function's environment variables in the template (``JOINER_STATE_TABLE`` -> the state
table's logical id). Resources the function's settings do not name resolve to
placeholders that match nothing.

Requests -> authorizations (:func:`authorizations`): the IAM action for each operation,
the resource ARNs it authorizes (ARN formats and resource types from policy_sentry's IAM
database, with the action's condition keys), the request tags per created resource
(``aws:RequestTag/*``, ``aws:TagKeys``), the resource tags of existing ones from moto's
state (``aws:ResourceTag/*``), the tag-on-create ``ec2:CreateTags`` each tagged resource
needs (``ec2:CreateAction``), ``iam:PassRole`` for the launch template's instance profile,
and the KMS data-key actions SendMessage needs on an encrypted queue. An operation without
a model raises: the guard never lets an unknown request through.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import json
import re
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from policy_sentry.querying.actions import get_action_data, get_actions_for_service
from policy_sentry.querying.arns import get_arn_type_details

from tests.support.iam_policy import (
    Authorization,
    Decision,
    UnsupportedPolicy,
    evaluate,
)

__all__ = [
    "ACCOUNT",
    "RUNTIME_USED_ACTIONS",
    "SENTINEL_CLUSTER",
    "Deployment",
    "Finding",
    "Guard",
    "authorizations",
    "build_arn",
    "deployment_of",
    "install",
    "load_deployment",
]

SENTINEL_CLUSTER = "iamguardsentinel"
ACCOUNT = "123456789012"  # moto's default account
PARTITION = "aws"
#: The created node role's name in the local worlds (simulator, end-to-end tests), whose settings
#: name no node role; a deployment's name holds its region (infra.config.created_node_role_name)
#: and reaches the functions as JOINER_NODE_ROLE.
LOCAL_NODE_ROLE = "JoinerNodeRole-{cluster}"
#: Settings fields of the environment variables that name the function's resources.
ENVIRONMENT_SETTINGS = {
    "JOINER_STATE_TABLE": "state_table",
    "JOINER_IDEMPOTENCY_TABLE": "idempotency_table",
    "JOINER_WORK_QUEUE_URL": "work_queue_url",
    "JOINER_INTERRUPTION_QUEUE_URL": "interruption_queue_url",
    "JOINER_PLANNER_FUNCTION": "scanner_function",
    "JOINER_STATE_BUCKET": "state_bucket",
    "JOINER_NODE_ROLE": "node_role",
}
#: Granted actions AWS services (not the handler's code) use with the function's role: log
#: delivery, X-Ray segments, the SQS event source mapping, and the key of the encrypted
#: tables and queues. Listed apart in the report, never flagged.
RUNTIME_USED_ACTIONS = frozenset(
    {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        # DynamoDB's use of a customer-managed table key on the caller's behalf (infra.access.TABLE_KEY_ACTIONS)
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:GenerateDataKeyPair",
        "kms:GenerateDataKeyPairWithoutPlaintext",
        "kms:GenerateDataKeyWithoutPlaintext",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
    }
)


# ---------------------------------------------------------------- ARNs and actions from policy_sentry


@functools.cache
def _action_entries(service: str, action: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    data = get_action_data(service, action)
    entries = data.get(service) if isinstance(data, dict) else None
    if not entries:
        raise UnsupportedPolicy(f"{service}:{action} is not an action in policy_sentry's IAM database")
    return tuple((entry["resource_arn_format"], tuple(entry["condition_keys"])) for entry in entries)


@functools.cache
def _raw_arn(service: str, resource_type: str) -> str:
    details = get_arn_type_details(service, resource_type)
    raw = details.get("raw_arn") if isinstance(details, dict) else None
    if not raw:
        raise UnsupportedPolicy(f"{service} has no resource type {resource_type!r} in policy_sentry's IAM database")
    return str(raw)


def build_arn(service: str, resource_type: str, region: str, account: str, *ids: str) -> str:
    """The ARN of a ``resource_type`` resource from its format in the IAM database, the
    ``${...}`` identifier placeholders filled with ``ids`` in order."""
    raw = _raw_arn(service, resource_type).replace("${Partition}", PARTITION).replace("${Region}", region)
    raw = raw.replace("${Account}", account)
    placeholders = re.findall(r"\$\{[A-Za-z]+\}", raw)
    if len(placeholders) != len(ids):
        raise UnsupportedPolicy(f"{service} {resource_type} ARN {raw} needs {len(placeholders)} identifiers, got {ids}")
    for placeholder, value in zip(placeholders, ids, strict=True):
        raw = raw.replace(placeholder, value, 1)
    return raw


def authorizes(action: str, resource_type: str) -> bool:
    """Whether ``action`` has resource-level permissions for ``resource_type`` (IAM database)."""
    service, name = action.split(":", 1)
    return _raw_arn(service, resource_type) in [arn for arn, _ in _action_entries(service, name)]


def _check_resource_type(action: str, resource_type: str | None) -> None:
    """``action`` authorizes ``resource_type`` (None: only ``*``) per the IAM database."""
    service, name = action.split(":", 1)
    formats = [arn for arn, _ in _action_entries(service, name)]
    if resource_type is None:
        if "*" not in formats:
            raise UnsupportedPolicy(f"{action} has resource-level permissions ({formats}); model its resources")
        return
    raw = _raw_arn(service, resource_type)
    if raw not in formats:
        raise UnsupportedPolicy(f"{action} does not authorize {service} {resource_type} per the IAM database")


@functools.cache
def service_actions(service: str) -> tuple[str, ...]:
    return tuple(sorted(get_actions_for_service(service)))


# ---------------------------------------------------------------- the template


def _synthesize(outdir: Path) -> dict[str, Any]:
    from infra import use_bundled_node

    use_bundled_node()
    from infra.synth import SKIP_BUNDLING, build_app

    app = build_app({"clusterName": SENTINEL_CLUSTER, **SKIP_BUNDLING}, outdir=str(outdir))
    (stack,) = app.synth().stacks
    return dict(json.loads((Path(outdir) / stack.template_file).read_text()))


@dataclass(frozen=True)
class Deployment:
    """The synthesized template: per function, its role's policy statements (unresolved)
    and its environment (env var -> intrinsic)."""

    template: dict[str, Any]
    statements: Mapping[str, tuple[dict[str, Any], ...]]
    environment: Mapping[str, Mapping[str, Any]]

    def for_cluster(self, cluster: str) -> Deployment:
        text = json.dumps(self.template).replace(SENTINEL_CLUSTER, cluster)
        return _deployment(json.loads(text))


def deployment_of(template: dict[str, Any]) -> Deployment:
    """The deployment of an already synthesized template (tests of other stack variants)."""
    return _deployment(template)


def _deployment(template: dict[str, Any]) -> Deployment:
    from infra.functions import FUNCTION_SPECS

    resources = template["Resources"]
    statements: dict[str, tuple[dict[str, Any], ...]] = {}
    environment: dict[str, Mapping[str, Any]] = {}
    for spec in FUNCTION_SPECS:
        found_functions = [
            value for key, value in resources.items() if value["Type"] == "AWS::Lambda::Function" and key.startswith(f"JoinerFunctions{spec.name.capitalize()}")
        ]
        if not found_functions:
            continue  # the watcher: responsive mode only
        (function,) = found_functions
        role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
        role = resources[role_id]["Properties"]
        if role.get("ManagedPolicyArns") or role.get("Policies"):
            raise UnsupportedPolicy(f"role {role_id}: managed or embedded policies are not evaluated")
        found: list[dict[str, Any]] = []
        for policy in resources.values():
            if policy["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in policy["Properties"].get("Roles", []):
                found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
        statements[spec.name] = tuple(found)
        environment[spec.name] = dict(function["Properties"].get("Environment", {}).get("Variables", {}))
    return Deployment(template, statements, environment)


_DEPLOYMENTS: dict[str, Deployment] = {}
_DEPLOYMENT_LOCK = threading.Lock()


def load_deployment(cluster: str) -> Deployment:
    """The deployment for ``cluster`` (synthesized once per process)."""
    with _DEPLOYMENT_LOCK:
        if SENTINEL_CLUSTER not in _DEPLOYMENTS:
            with tempfile.TemporaryDirectory(prefix="iam-guard-") as outdir:
                _DEPLOYMENTS[SENTINEL_CLUSTER] = _deployment(_synthesize(Path(outdir)))
        if cluster not in _DEPLOYMENTS:
            _DEPLOYMENTS[cluster] = _DEPLOYMENTS[SENTINEL_CLUSTER].for_cluster(cluster)
        return _DEPLOYMENTS[cluster]


def _queue_name(url: str) -> str:
    return urlparse(url).path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Binding:
    """What the template's intrinsics mean for one function in one test world."""

    region: str
    account: str
    #: logical id -> attribute ("Ref", "Arn") -> value
    resources: Mapping[str, Mapping[str, str]]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                pseudo = {"AWS::Region": self.region, "AWS::AccountId": self.account, "AWS::Partition": PARTITION, "AWS::URLSuffix": "amazonaws.com"}
                if argument in pseudo:
                    return pseudo[argument]
                return self.resources.get(argument, {}).get("Ref", f"<unbound {argument}>")
            if key == "Fn::GetAtt":
                logical, attribute = argument
                return self.resources.get(logical, {}).get(attribute, f"<unbound {logical}.{attribute}>")
            if key == "Fn::Join":
                separator, parts = argument
                return separator.join(str(self.resolve(part)) for part in parts)
            if key.startswith("Fn::"):
                raise UnsupportedPolicy(f"intrinsic {key} is not resolved by the guard")
        return {k: self.resolve(v) for k, v in value.items()}


def bind(deployment: Deployment, function: str, settings: Any) -> Binding:
    """Resolve the template for ``function`` running with ``settings``."""
    region, account = settings.region, ACCOUNT
    bound: dict[str, dict[str, str]] = {}
    resources = deployment.template["Resources"]
    for variable, reference in deployment.environment[function].items():
        field_name = ENVIRONMENT_SETTINGS.get(variable)
        if field_name is None or not isinstance(reference, dict) or "Ref" not in reference:
            continue
        value = getattr(settings, field_name, None)
        if field_name == "node_role" and not value:
            # The local worlds run without JOINER_NODE_ROLE and name the created role like this.
            value = LOCAL_NODE_ROLE.format(cluster=settings.cluster_name)
        if not value:
            continue
        logical = reference["Ref"]
        if resources[logical]["Type"] == "AWS::DynamoDB::Table":
            bound[logical] = {"Ref": value, "Arn": build_arn("dynamodb", "table", region, account, value)}
        elif resources[logical]["Type"] == "AWS::SQS::Queue":
            bound[logical] = {"Ref": value, "Arn": build_arn("sqs", "queue", region, account, _queue_name(value))}
        elif resources[logical]["Type"] == "AWS::S3::Bucket":
            bound[logical] = {"Ref": value, "Arn": build_arn("s3", "bucket", region, account, value)}
        elif resources[logical]["Type"] == "AWS::Lambda::Function":
            bound[logical] = {"Ref": value, "Arn": build_arn("lambda", "function", region, account, value)}
        elif resources[logical]["Type"] == "AWS::IAM::Role":
            # The created node role's name holds the region (infra.config.created_node_role_name).
            bound[logical] = {"Ref": value, "Arn": build_arn("iam", "role", region, account, value)}
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::KMS::Key":
            bound[logical] = {"Arn": build_arn("kms", "key", region, account, logical)}
        elif resource["Type"] == "AWS::IAM::Role" and isinstance(resource["Properties"].get("RoleName"), str):
            bound[logical] = {"Arn": build_arn("iam", "role", region, account, resource["Properties"]["RoleName"])}
    return Binding(region, account, bound)


def bucket_keys(deployment: Deployment, binding: Binding) -> dict[str, str]:
    """Bucket name -> the ARN of the KMS key that encrypts its objects (in the deployment)."""
    out = {}
    for logical, resource in deployment.template["Resources"].items():
        if resource["Type"] != "AWS::S3::Bucket":
            continue
        rules = resource["Properties"].get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
        key = next((r["ServerSideEncryptionByDefault"].get("KMSMasterKeyID") for r in rules if "ServerSideEncryptionByDefault" in r), None)
        name = binding.resources.get(logical, {}).get("Ref")
        if key is not None and name is not None:
            out[name] = str(binding.resolve(key))
    return out


def queue_keys(deployment: Deployment, binding: Binding) -> dict[str, str]:
    """Queue ARN -> the ARN of the KMS key that encrypts it (in the deployment)."""
    out = {}
    for logical, resource in deployment.template["Resources"].items():
        key = resource["Properties"].get("KmsMasterKeyId") if resource["Type"] == "AWS::SQS::Queue" else None
        arn = binding.resources.get(logical, {}).get("Arn")
        if key is not None and arn is not None:
            out[arn] = str(binding.resolve(key))
    return out


# ---------------------------------------------------------------- moto's state


class MotoState:
    """Existing resources' tags and launch templates, read from moto's in-process backends."""

    def __init__(self, region: str, account: str = ACCOUNT) -> None:
        from moto.ec2.models import ec2_backends

        self.ec2 = ec2_backends[account][region]

    def tags(self, resource_id: str) -> dict[str, str] | None:
        """Tags of an existing resource; None when moto does not know the resource."""
        if resource_id.startswith("i-"):
            try:
                self.ec2.get_instance(resource_id)
            except Exception:  # noqa: BLE001 - moto's not-found error
                return None
        elif resource_id.startswith("lt-") and resource_id not in self.ec2.launch_templates:
            return None
        return dict(self.ec2.tags.get(resource_id, {}))

    def launch_template(self, template_id: str | None, name: str | None, version: str | None) -> tuple[str, dict[str, Any]] | None:
        templates = self.ec2.launch_templates
        template = templates.get(template_id) if template_id else next((t for t in templates.values() if t.name == name), None)
        if template is None:
            return None
        chosen = template.get_version(version or "$Default")
        return template.id, dict(chosen.data)

    def image_snapshots(self, image_id: str) -> list[str]:
        image = self.ec2.amis.get(image_id)
        if image is None:
            return []
        return sorted(
            {
                str(m.get("Ebs", {}).get("SnapshotId"))
                for m in getattr(image, "block_device_mappings", None) or []
                if isinstance(m, dict) and m.get("Ebs", {}).get("SnapshotId")
            }
        )


# ---------------------------------------------------------------- requests -> authorizations


def _tag_context(tags: Mapping[str, str]) -> dict[str, str | list[str]]:
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{key}": value for key, value in tags.items()}
    context["aws:TagKeys"] = sorted(tags)
    return context


def _resource_context(tags: Mapping[str, str] | None) -> dict[str, str]:
    return {f"aws:ResourceTag/{key}": value for key, value in (tags or {}).items()}


_ABSENT_TAGS = ("aws:RequestTag/*", "aws:ResourceTag/*", "aws:TagKeys")


def _spec_tags(specifications: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for spec in specifications or []:
        for tag in spec.get("Tags") or []:
            out[str(spec["ResourceType"])][str(tag["Key"])] = str(tag.get("Value", ""))
    return out


@dataclass
class _Builder:
    region: str
    account: str
    operation: str
    out: list[Authorization] = field(default_factory=list)

    def add(self, action: str, resource_type: str | None, resource: str, context: Mapping[str, Any] | None = None, reason: str = "") -> None:
        _check_resource_type(action, resource_type)
        full = {"aws:RequestedRegion": self.region, **(context or {})}
        self.out.append(Authorization(action, resource, full, _ABSENT_TAGS, reason or f"{self.operation}: {resource_type or '*'}"))

    def arn(self, service: str, resource_type: str, *ids: str, account: str | None = None) -> str:
        return build_arn(service, resource_type, self.region, self.account if account is None else account, *ids)


_EC2_READS = frozenset(
    {
        "DescribeInstances",
        "DescribeSubnets",
        "DescribeSecurityGroups",
        "DescribeImages",
        "DescribeLaunchTemplates",
        "DescribeSpotPriceHistory",
        "DescribeInstanceTypes",
        "DescribeInstanceTypeOfferings",
        "DescribeAvailabilityZones",
        "DescribeLaunchTemplateVersions",
        "DescribeCapacityReservations",
    }
)
_DYNAMODB_ITEM_OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable"})
_TRANSACT_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
_NO_PERMISSION = frozenset({("sts", "GetCallerIdentity")})


def authorizations(
    service: str,
    operation: str,
    params: Mapping[str, Any],
    *,
    region: str,
    account: str = ACCOUNT,
    state: MotoState | None = None,
    encrypted_queues: Mapping[str, str] | None = None,
    encrypted_buckets: Mapping[str, str] | None = None,
) -> list[Authorization]:
    """What IAM authorizes for one request; raises :class:`UnsupportedPolicy` for an
    operation the guard has no model of."""
    if (service, operation) in _NO_PERMISSION:
        return []
    b = _Builder(region, account, operation)
    if service == "ec2":
        _ec2(b, operation, params, state or MotoState(region, account))
    elif service == "dynamodb":
        _dynamodb(b, operation, params)
    elif service == "sqs" and operation in ("SendMessage", "SendMessageBatch"):
        queue = b.arn("sqs", "queue", _queue_name(params["QueueUrl"]))
        b.add("sqs:SendMessage", "queue", queue)
        key = (encrypted_queues or {}).get(queue)
        if key is not None:
            # SQS server-side encryption with a customer key: the producer needs the data-key actions.
            for action in ("kms:GenerateDataKey", "kms:Decrypt"):
                b.add(action, "key", key, reason=f"{operation} to a KMS-encrypted queue")
    elif service == "sqs" and operation in ("ChangeMessageVisibility", "ChangeMessageVisibilityBatch"):
        # The interruption handler shortens a failed message's visibility (adapters.queue.redeliver_sooner),
        # the termination handler a received batch's (adapters.queue.shorten_visibility); the batch
        # call is authorized as sqs:ChangeMessageVisibility.
        b.add("sqs:ChangeMessageVisibility", "queue", b.arn("sqs", "queue", _queue_name(params["QueueUrl"])))
    elif service == "ssm" and operation == "GetParameter":
        name = str(params["Name"]).lstrip("/")
        # AWS's public parameters (/aws/service/...) have no account in their ARN.
        owner = "" if name.startswith("aws/service/") else None
        b.add("ssm:GetParameter", "parameter", b.arn("ssm", "parameter", name, account=owner))
    elif service == "pricing" and operation == "GetProducts":
        # The Price List API is served from a few regions only (us-east-1 ...): the client's
        # region is what aws:RequestedRegion holds, not the deployment's.
        b.add("pricing:GetProducts", None, "*")
    elif service == "lambda" and operation == "Invoke":
        # The watcher wakes the scanner by name (an unqualified function: no version or alias).
        b.add("lambda:InvokeFunction", "function", b.arn("lambda", "function", str(params["FunctionName"])))
    elif service == "s3" and operation in ("GetObject", "PutObject"):
        bucket = str(params["Bucket"])
        b.add(f"s3:{operation}", "object", b.arn("s3", "object", bucket, str(params["Key"])))
        if operation == "GetObject":
            # S3 answers a missing key with 404 (the adapter's None) instead of 403 only to a
            # caller allowed to list the bucket.
            b.add("s3:ListBucket", "bucket", b.arn("s3", "bucket", bucket), reason="GetObject of a possibly missing key")
        key = (encrypted_buckets or {}).get(bucket)
        if key is not None:
            # SSE-KMS: S3 decrypts (GetObject) or asks for a data key (PutObject) as the caller.
            b.add("kms:Decrypt" if operation == "GetObject" else "kms:GenerateDataKey", "key", key, reason=f"{operation} in a KMS-encrypted bucket")
    elif service == "eks" and operation == "DescribeCluster":
        b.add("eks:DescribeCluster", "cluster", b.arn("eks", "cluster", str(params["name"])))
    else:
        raise UnsupportedPolicy(f"the IAM guard has no model of {service} {operation}")
    return b.out


def _ec2(b: _Builder, operation: str, params: Mapping[str, Any], state: MotoState) -> None:
    action = f"ec2:{operation}"
    if operation in _EC2_READS:
        b.add(action, None, "*")
    elif operation == "TerminateInstances":
        for instance_id in params["InstanceIds"]:
            tags = state.tags(instance_id)
            if tags is not None:  # EC2 answers InvalidInstanceID.NotFound for unknown ids
                b.add(action, "instance", b.arn("ec2", "instance", instance_id), _resource_context(tags))
    elif operation == "DeleteLaunchTemplate":
        found = state.launch_template(params.get("LaunchTemplateId"), params.get("LaunchTemplateName"), None)
        if found is not None:
            b.add(action, "launch-template", b.arn("ec2", "launch-template", found[0]), _resource_context(state.tags(found[0])))
    elif operation == "CreateLaunchTemplate":
        tags = _spec_tags(params.get("TagSpecifications")).get("launch-template", {})
        arn = b.arn("ec2", "launch-template", "lt-new")
        b.add(action, "launch-template", arn, _tag_context(tags))
        if tags:
            b.add("ec2:CreateTags", "launch-template", arn, {**_tag_context(tags), "ec2:CreateAction": operation})
    elif operation == "CreateFleet":
        _create_fleet(b, params, state)
    else:
        raise UnsupportedPolicy(f"the IAM guard has no model of ec2 {operation}")


def _create_fleet(b: _Builder, params: Mapping[str, Any], state: MotoState) -> None:
    """CreateFleet authorizes the fleet, the launch template, and (under CreateFleet and, as
    AWS documents for resources named in a launch template, RunInstances) everything the
    launch creates or uses."""
    fleet_tags = _spec_tags(params.get("TagSpecifications"))
    b.add("ec2:CreateFleet", "fleet", b.arn("ec2", "fleet", "fleet-new"), _tag_context(fleet_tags.get("fleet", {})))
    if fleet_tags.get("fleet"):
        b.add("ec2:CreateTags", "fleet", b.arn("ec2", "fleet", "fleet-new"), {**_tag_context(fleet_tags["fleet"]), "ec2:CreateAction": "CreateFleet"})
    spot = params.get("TargetCapacitySpecification", {}).get("DefaultTargetCapacityType") == "spot"
    for config in params.get("LaunchTemplateConfigs") or []:
        spec = config.get("LaunchTemplateSpecification") or {}
        found = state.launch_template(spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"), spec.get("Version"))
        if found is None:
            continue  # EC2 answers with a launch-template-not-found error; nothing is launched
        template_id, data = found
        template_tags = _spec_tags(data.get("TagSpecifications"))
        launched: dict[str, dict[str, str]] = {}
        for resource_type in ("instance", "volume", "network-interface"):
            launched[resource_type] = {**template_tags.get(resource_type, {}), **fleet_tags.get(resource_type, {})}
        if spot:
            launched["spot-instances-request"] = dict(template_tags.get("spot-instances-request", {}))
        existing: list[tuple[str, str, dict[str, str]]] = [
            ("launch-template", b.arn("ec2", "launch-template", template_id), _resource_context(state.tags(template_id)))
        ]
        image = data.get("ImageId")
        if image:
            existing.append(("image", b.arn("ec2", "image", str(image), account=""), {}))
            existing += [("snapshot", b.arn("ec2", "snapshot", snap, account=""), {}) for snap in state.image_snapshots(str(image))]
        for group in data.get("SecurityGroupIds") or []:
            existing.append(("security-group", b.arn("ec2", "security-group", str(group)), {}))
        for subnet in sorted({str(o["SubnetId"]) for o in config.get("Overrides") or [] if o.get("SubnetId")}):
            existing.append(("subnet", b.arn("ec2", "subnet", subnet), {}))
        # Each resource under each launch action the IAM database says authorizes its type
        # (CreateFleet: fleet, image, instance, launch-template, subnet, volume; RunInstances
        # also network-interface, security-group, snapshot). The database lists neither for
        # spot-instances-request, so spot requests are authorized by no statement here.
        for action in ("ec2:CreateFleet", "ec2:RunInstances"):
            for resource_type, arn, context in existing:
                if authorizes(action, resource_type):
                    b.add(action, resource_type, arn, context)
            for resource_type, tags in launched.items():
                if authorizes(action, resource_type):
                    b.add(action, resource_type, b.arn("ec2", resource_type, f"{resource_type}-new"), _tag_context(tags))
        for resource_type, tags in launched.items():
            if tags and authorizes("ec2:CreateTags", resource_type):
                b.add(
                    "ec2:CreateTags",
                    resource_type,
                    b.arn("ec2", resource_type, f"{resource_type}-new"),
                    {**_tag_context(tags), "ec2:CreateAction": "CreateFleet"},
                )
        _ebs_key_use(b, data)
        profile = data.get("IamInstanceProfile") or {}
        name = profile.get("Name") or str(profile.get("Arn", "")).rsplit("/", 1)[-1]
        if name:
            # The stack names each instance profile like its role (infra/node_role.py).
            b.add(
                "iam:PassRole", "role", b.arn("iam", "role", name), {"iam:PassedToService": "ec2.amazonaws.com"}, reason=f"CreateFleet: instance profile {name}"
            )


def _ebs_key_use(b: _Builder, data: Mapping[str, Any]) -> None:
    """Volumes encrypted with a customer-managed key: EC2 uses the key on the launching caller's
    behalf (kms:ViaService ec2), creating a grant for the volume (kms:GrantIsForAWSResource).
    A volume without KmsKeyId uses the account's default EBS key, which the request does not
    name: the guard cannot model that case (docs/infra.md: ebsKmsKeyArn)."""
    keys = sorted({str(m["Ebs"]["KmsKeyId"]) for m in data.get("BlockDeviceMappings") or [] if (m.get("Ebs") or {}).get("KmsKeyId")})
    via = {"kms:ViaService": f"ec2.{b.region}.amazonaws.com"}
    for key in keys:
        arn = key if key.startswith("arn:") else b.arn("kms", "key", key)
        reason = f"CreateFleet: a volume encrypted with {key}"
        b.add("kms:CreateGrant", "key", arn, {**via, "kms:GrantIsForAWSResource": "true"}, reason=reason)
        for action in ("kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo"):
            b.add(action, "key", arn, via, reason=reason)


def _dynamodb(b: _Builder, operation: str, params: Mapping[str, Any]) -> None:
    if operation in _DYNAMODB_ITEM_OPERATIONS:
        table = str(params["TableName"])
        if operation in ("Query", "Scan") and params.get("IndexName"):
            b.add(f"dynamodb:{operation}", "index", b.arn("dynamodb", "index", table, str(params["IndexName"])))
        else:
            b.add(f"dynamodb:{operation}", "table", b.arn("dynamodb", "table", table))
    elif operation in ("TransactWriteItems", "TransactGetItems"):
        for item in params["TransactItems"]:
            ((kind, body),) = item.items()
            b.add(f"dynamodb:{_TRANSACT_ACTIONS[kind]}", "table", b.arn("dynamodb", "table", str(body["TableName"])))
    elif operation in ("BatchWriteItem", "BatchGetItem"):
        for table in params["RequestItems"]:
            b.add(f"dynamodb:{operation}", "table", b.arn("dynamodb", "table", str(table)))
    else:
        raise UnsupportedPolicy(f"the IAM guard has no model of dynamodb {operation}")


# ---------------------------------------------------------------- the ledger


@dataclass(frozen=True)
class Finding:
    """A request the function's policies would deny, or one the guard could not decide."""

    function: str
    request: str
    message: str


class Guard:
    """Evaluates attributed requests and remembers what each function exercised."""

    def __init__(self, deployment_loader: Callable[[str], Deployment] = load_deployment) -> None:
        self._load = deployment_loader
        self._lock = threading.Lock()
        self.findings: list[Finding] = []
        #: function -> actions allowed for it at least once
        self.exercised: dict[str, set[str]] = defaultdict(set)
        self.requests = 0
        self.clusters: set[str] = set()

    def check(self, function: str, settings: Any, service: str, operation: str, params: Mapping[str, Any], region: str) -> None:
        request = f"{service} {operation}"
        try:
            deployment = self._load(settings.cluster_name)
            binding = bind(deployment, function, settings)
            statements = [binding.resolve(s) for s in deployment.statements[function]]
            needed = authorizations(
                service,
                operation,
                params,
                region=region,
                account=binding.account,
                encrypted_queues=queue_keys(deployment, binding),
                encrypted_buckets=bucket_keys(deployment, binding),
            )
            decisions: list[tuple[Authorization, Decision]] = [(a, evaluate(statements, a)) for a in needed]
        except UnsupportedPolicy as error:
            self._record(Finding(function, request, f"undecidable: {error}"))
            return
        with self._lock:
            self.requests += 1
            self.clusters.add(settings.cluster_name)
            for authorization, decision in decisions:
                if decision.allowed:
                    self.exercised[function].add(authorization.action)
        for authorization, decision in decisions:
            if not decision.allowed:
                how = "explicitly denied" if decision.explicitly_denied else "not allowed"
                context = {k: v for k, v in authorization.context.items() if k != "aws:RequestedRegion"}
                self._record(
                    Finding(function, request, f"{authorization.action} on {authorization.resource} {how} ({authorization.reason}; context {context})")
                )

    def _record(self, finding: Finding) -> None:
        with self._lock:
            self.findings.append(finding)

    def granted(self) -> dict[str, set[str]]:
        """Per function: every action its policies allow somewhere (wildcards expanded with
        the IAM database), for any cluster this run saw (sentinel if none)."""
        deployment = self._load(min(self.clusters) if self.clusters else SENTINEL_CLUSTER)
        out: dict[str, set[str]] = {}
        for function, statements in deployment.statements.items():
            actions: set[str] = set()
            for statement in statements:
                if statement.get("Effect") != "Allow":
                    continue
                for pattern in statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]:
                    if "*" in pattern:
                        service = pattern.split(":", 1)[0]
                        actions |= {a for a in service_actions(service) if re.fullmatch(pattern.replace("*", ".*"), a, re.IGNORECASE)}
                    else:
                        actions.add(pattern)
            out[function] = actions
        return out

    def unexercised(self) -> dict[str, list[str]]:
        """Per function: granted actions no attributed request needed (Lambda-side ones apart)."""
        return {function: sorted(actions - self.exercised.get(function, set()) - RUNTIME_USED_ACTIONS) for function, actions in sorted(self.granted().items())}

    def report(self) -> dict[str, Any]:
        granted = self.granted()
        return {
            "requests_evaluated": self.requests,
            "findings": [f"{f.function}: {f.request}: {f.message}" for f in self.findings],
            "functions": {
                function: {
                    "granted": sorted(actions),
                    "exercised": sorted(self.exercised.get(function, set())),
                    "unexercised": sorted(actions - self.exercised.get(function, set()) - RUNTIME_USED_ACTIONS),
                    "used_by_lambda_not_code": sorted(actions & RUNTIME_USED_ACTIONS),
                }
                for function, actions in sorted(granted.items())
            },
        }


# ---------------------------------------------------------------- capture


def _hook(guard: Guard, service: str, region: str) -> Callable[..., None]:
    def before_parameter_build(params: Mapping[str, Any], model: Any, **_: Any) -> None:
        from testworld.lambdas import current_invocation

        invocation = current_invocation()
        if invocation is None:
            return
        try:
            settings = invocation.settings()
        except LookupError as error:
            guard._record(Finding(invocation.name, f"{service} {model.name}", f"undecidable: {error}"))
            return
        guard.check(invocation.name, settings, service, model.name, params, region)

    return before_parameter_build


def _submit_in_context(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def submit(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return original(self, contextvars.copy_context().run, fn, *args, **kwargs)

    submit.__iam_guard__ = True  # type: ignore[attr-defined]
    return submit


def install(guard: Guard) -> Iterator[None]:
    """Hook every botocore client created while the generator is suspended; thread pools
    run their tasks in a copy of the submitter's context so requests made by a handler's
    worker threads are attributed to it. Use as a context manager via ``contextlib``."""
    import botocore.session

    original_create = botocore.session.Session.create_client
    original_submit = concurrent.futures.ThreadPoolExecutor.submit

    @functools.wraps(original_create)
    def create_client(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        client = original_create(self, service_name, *args, **kwargs)
        client.meta.events.register(
            "before-parameter-build",
            _hook(guard, service_name, client.meta.region_name),
        )
        return client

    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
    if not getattr(original_submit, "__iam_guard__", False):
        concurrent.futures.ThreadPoolExecutor.submit = _submit_in_context(original_submit)  # type: ignore[method-assign]
    try:
        yield
    finally:
        botocore.session.Session.create_client = original_create  # type: ignore[method-assign]
        concurrent.futures.ThreadPoolExecutor.submit = original_submit  # type: ignore[method-assign]
