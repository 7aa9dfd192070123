"""S3: the bucket holding the cluster state's image (joiner.services.cluster_image), which cold
Lambda containers restore instead of listing every pod and Node."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge

__all__ = ["IMAGE_KEYS", "ClusterImageBucket"]

#: The objects the functions read and the scanner writes (joiner.services.cluster_image).
IMAGE_KEYS: tuple[str, ...] = ("cluster-state/base", "cluster-state/changes")
#: Objects not rewritten for this long are deleted (the scanner rewrites the image every few
#: minutes; a stale one is only ever a list the next container makes anyway).
EXPIRE_AFTER = Duration.days(2)


class ClusterImageBucket(Construct):
    """A private bucket: Joiner's key, TLS only, public access blocked, objects expiring
    :data:`EXPIRE_AFTER` after their last write, kept when the stack is deleted (it empties
    itself within two days; then delete it)."""

    def __init__(self, scope: Construct, construct_id: str, *, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self.key = key
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=EXPIRE_AFTER)],
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.bucket,
            "AwsSolutions-S1",
            "A cache of the cluster state rewritten every few minutes by Joiner's scanner only; CloudTrail data events cover audits.",
        )

    def grant_read(self, role: iam.IRole) -> None:
        """GetObject of the image's objects, ListBucket (a missing object is then a 404, not a
        403) and decryption with the bucket's key."""
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[self.bucket.arn_for_objects(key) for key in IMAGE_KEYS]))
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]))
        self.key.grant(role, "kms:Decrypt")

    def grant_write(self, role: iam.IRole) -> None:
        """PutObject of the image's objects and the bucket key's data keys."""
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[self.bucket.arn_for_objects(key) for key in IMAGE_KEYS]))
        self.key.grant(role, "kms:GenerateDataKey")
