"""``JoinerStack``: a stack holding one :class:`infra.joiner.Joiner` construct."""

from __future__ import annotations

import os

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from infra.config import JoinerConfig
from infra.joiner import Joiner
from infra.layer import LayerBundler

__all__ = ["JoinerStack", "stack_name_for"]


def stack_name_for(cluster_name: str) -> str:
    return f"Joiner-{cluster_name}"[:128]


class JoinerStack(Stack):
    """Joiner for ``config.cluster_name`` in ``config.region`` (default: the CLI's region).

    Without an account in the environment (``CDK_DEFAULT_ACCOUNT`` unset, as in tests) the
    stack is environment-agnostic: ARNs use ``AWS::Region``/``AWS::AccountId``.
    """

    def __init__(self, scope: Construct, construct_id: str | None = None, *, config: JoinerConfig, layer_bundler: LayerBundler | None = None) -> None:
        account = os.environ.get("CDK_DEFAULT_ACCOUNT")
        region = config.region or os.environ.get("CDK_DEFAULT_REGION")
        env = Environment(account=account, region=region) if (account or config.region) else None
        super().__init__(
            scope,
            construct_id or stack_name_for(config.cluster_name),
            env=env,
            description=f"Joiner: serverless node autoscaler for EKS cluster {config.cluster_name}",
        )
        self.joiner = Joiner(self, "Joiner", config=config, layer_bundler=layer_bundler)
        Tags.of(self).add("joiner.dev/cluster", config.cluster_name)
