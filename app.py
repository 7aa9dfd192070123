#!/usr/bin/env python3
"""CDK entry point: ``cdk deploy -c clusterName=<cluster>`` (see docs/infra.md)."""

import sys

from infra import use_bundled_node

use_bundled_node()

from infra.config import ConfigError  # noqa: E402 (after choosing Node for jsii)
from infra.synth import build_app  # noqa: E402

try:
    build_app().synth()
except ConfigError as error:
    sys.exit(f"joiner: {error}")
