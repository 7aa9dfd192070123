"""moto building blocks shared by ``joiner demo`` and the tests: what the CDK stack and an
EKS cluster's VPC would hold (network, cluster, EKS AMI parameters, state table, work queue),
dummy credentials, and an HTTP moto server that serialises requests.

Development-only: imports moto (and werkzeug), which the Lambda layer does not ship.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.ssm.models import Parameter, ssm_backends
from werkzeug.serving import make_server

__all__ = [
    "REGION",
    "ZONES",
    "K8S_VERSION",
    "Network",
    "SerialMotoServer",
    "create_eks_cluster",
    "create_network",
    "create_state_table",
    "create_work_queue",
    "environment",
    "fake_credentials",
    "item_level_transaction_rollback",
    "moto_amis",
    "put_eks_ami_parameters",
    "put_public_parameter",
]

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
K8S_VERSION = "1.31"


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` for the block; what was there before is restored."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fake_credentials(region: str = REGION) -> contextlib.AbstractContextManager[None]:
    """Dummy credentials and region for boto3 (restored afterwards)."""
    return environment(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
        }
    )


# ---------------------------------------------------------------- EC2 network and cluster


@dataclass
class Network:
    vpc_id: str
    subnets: dict[str, str]  # zone -> subnet id (tagged for discovery)
    decoy_subnet: str  # same VPC, not tagged for discovery
    security_groups: list[str]  # tagged for discovery
    named_security_group: str  # untagged, found by name
    discovery_tag: tuple[str, str]


def create_network(ec2: Any, cluster: str, zones: Sequence[str] = ZONES, *, cidr_octet: int = 0) -> Network:
    """A VPC with one discovery-tagged subnet per zone, an untagged decoy subnet, two tagged
    security groups and one found only by name."""
    tag = ("joiner.dev/discovery", cluster)
    vpc = ec2.create_vpc(CidrBlock=f"10.{cidr_octet}.0.0/16")["Vpc"]["VpcId"]
    subnets: dict[str, str] = {}
    for index, zone in enumerate(zones):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.{cidr_octet}.{index * 32}.0/19", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        ec2.create_tags(Resources=[subnet], Tags=[{"Key": tag[0], "Value": tag[1]}, {"Key": "Name", "Value": f"{cluster}-private-{zone}"}])
        subnets[zone] = subnet
    decoy = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.{cidr_octet}.200.0/24", AvailabilityZone=zones[0])["Subnet"]["SubnetId"]
    groups = []
    for name in ("nodes", "pods"):
        group = ec2.create_security_group(GroupName=f"{cluster}-{name}", Description=name, VpcId=vpc)["GroupId"]
        ec2.create_tags(Resources=[group], Tags=[{"Key": tag[0], "Value": tag[1]}])
        groups.append(group)
    named = ec2.create_security_group(GroupName=f"{cluster}-extra", Description="extra", VpcId=vpc)["GroupId"]
    return Network(vpc, subnets, decoy, sorted(groups), named, tag)


def create_eks_cluster(eks: Any, name: str, subnet_ids: Sequence[str], *, version: str = K8S_VERSION, service_cidr: str = "10.100.0.0/16") -> dict[str, Any]:
    """An EKS cluster on ``subnet_ids``; returns its description."""
    eks.create_cluster(
        name=name,
        version=version,
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/{name}-cluster",
        resourcesVpcConfig={"subnetIds": list(subnet_ids)},
        kubernetesNetworkConfig={"serviceIpv4Cidr": service_cidr},
    )
    cluster: dict[str, Any] = eks.describe_cluster(name=name)["cluster"]
    return cluster


def moto_amis(ec2: Any) -> dict[str, str]:
    """One existing moto AMI per EC2 architecture: {"x86_64": ami, "arm64": ami}."""
    out = {}
    for arch in ("x86_64", "arm64"):
        images = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}, {"Name": "owner-alias", "Values": ["amazon"]}])["Images"]
        out[arch] = sorted(image["ImageId"] for image in images)[0]
    return out


def put_public_parameter(name: str, value: str, region: str = REGION) -> None:
    """Write an ``/aws/service/...`` SSM parameter (moto refuses PutParameter on that namespace)."""
    backend = ssm_backends[DEFAULT_ACCOUNT_ID][region]
    backend._parameters[name].append(
        # moto types Parameter as abstract (CloudFormationModel) and its date as a datetime; it serialises 0 as the epoch.
        Parameter(  # type: ignore[abstract]
            account_id=DEFAULT_ACCOUNT_ID,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=0,  # type: ignore[arg-type]
            version=len(backend._parameters[name]) + 1,
            data_type="aws:ec2:image",
        )
    )


def put_eks_ami_parameters(
    amis: Mapping[str, str],
    version: str = K8S_VERSION,
    release: str | None = None,
    region: str = REGION,
    variant: str = "standard",
) -> None:
    """The EKS-optimised AL2023 parameters of ``variant`` (``standard``, ``nvidia``,
    ``neuron``; ``recommended``, or a pinned ``release``) per arch."""
    for arch, ami in amis.items():
        name = "recommended" if release is None else f"amazon-eks-node-al2023-{arch}-{variant}-{version}-{release}"
        put_public_parameter(f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/{variant}/{name}/image_id", ami, region)


# ---------------------------------------------------------------- DynamoDB and SQS


def create_state_table(dynamodb: Any, name: str = "joiner-state") -> str:
    """The state table per the shared schema (pk/sk, GSIs byInstance, byNodePool and the sparse
    byOpenClaim, TTL expiresAt)."""
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk", "instanceId", "nodePool", "openClaim")],
        GlobalSecondaryIndexes=[
            {"IndexName": "byInstance", "KeySchema": [{"AttributeName": "instanceId", "KeyType": "HASH"}], "Projection": {"ProjectionType": "ALL"}},
            {
                "IndexName": "byNodePool",
                "KeySchema": [{"AttributeName": "nodePool", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": "byOpenClaim",
                "KeySchema": [{"AttributeName": "openClaim", "KeyType": "HASH"}, {"AttributeName": "pk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
    )
    dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiresAt"})
    return name


def create_work_queue(sqs: Any, name: str = "joiner-work") -> str:
    """A plain SQS queue; returns its URL."""
    url: str = sqs.create_queue(QueueName=name)["QueueUrl"]
    return url


# ---------------------------------------------------------------- moto over HTTP


class _QuietHandler(MotoRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class SerialMotoServer(ThreadedMotoServer):
    """moto over real HTTP on loopback, serving ONE request at a time.

    moto's backends are not thread-safe: a threaded server could interleave two conditional
    writes inside moto and let both pass, which DynamoDB never does. Serving requests one by one
    models DynamoDB's per-request atomicity while clients still race between their requests.
    """

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(self._ip_address, self._port, app, threaded=False, request_handler=_QuietHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def endpoint(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"


# ---------------------------------------------------------------- moto at scale


@contextlib.contextmanager
def item_level_transaction_rollback() -> Iterator[None]:
    """moto backs up every table a TransactWriteItems touches with a deep copy of the whole
    table, which makes thousands of transactions on one table quadratic. Inside this context
    a transaction instead saves, and on failure restores, the items it names, which is all
    DynamoDB rolls back too. Not thread-safe: use in-process or with :class:`SerialMotoServer`."""
    import moto.dynamodb.models as models

    backend = models.DynamoDBBackend
    original = backend.transact_write_items

    def transact(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = []
        for entry in transact_items:
            ((_, op),) = entry.items()
            table = self.get_table(op["TableName"])
            key = op.get("Key") or {a: op["Item"][a] for a in (table.hash_key_attr, table.range_key_attr) if a}
            current = self.get_item(op["TableName"], key)
            saved.append((op["TableName"], key, current.to_json()["Attributes"] if current is not None else None))
        real_copy = models.copy  # type: ignore[attr-defined]
        models.copy = types.SimpleNamespace(deepcopy=lambda table: table)  # type: ignore[attr-defined,assignment]
        try:
            original(self, transact_items)
        except Exception:
            for name, key, attributes in reversed(saved):
                if attributes is not None:
                    self.put_item(name, attributes)
                elif self.get_item(name, key) is not None:
                    self.delete_item(name, key)
            raise
        finally:
            models.copy = real_copy  # type: ignore[attr-defined]

    backend.transact_write_items = transact  # type: ignore[method-assign]
    try:
        yield
    finally:
        backend.transact_write_items = original  # type: ignore[method-assign]
