"""Build the CDK app (``build_app``) and synthesize it: ``python -m infra.synth``.

``app.py`` (the ``cdk`` CLI's entry point) and the tests use :func:`build_app` too, so
every synth runs the same context defaults from ``cdk.json`` and the cdk-nag checks.

    python -m infra.synth [-c clusterName=prod ...] [--no-bundling] [--out cdk.out]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
CDK_JSON = REPOSITORY_ROOT / "cdk.json"
#: Context that tells CDK to bundle no stack's assets (offline synth, tests).
SKIP_BUNDLING: dict[str, list[str]] = {"aws:cdk:bundling-stacks": []}

__all__ = ["build_app", "cdk_json_context", "main", "SKIP_BUNDLING"]


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` block of cdk.json (feature flags and defaults)."""
    try:
        return dict(json.loads(CDK_JSON.read_text(encoding="utf-8")).get("context", {}))
    except FileNotFoundError:
        return {}


def build_app(context: Mapping[str, Any] | None = None, outdir: str | None = None, layer_bundler: Any = None):  # type: ignore[no-untyped-def]
    """An ``App`` with cdk.json's context under ``context``, one ``JoinerStack`` and cdk-nag.

    Raises :class:`infra.config.ConfigError` for missing or malformed settings.
    """
    from infra import use_bundled_node

    use_bundled_node()
    from aws_cdk import App

    from infra.config import JoinerConfig
    from infra.nag import add_nag_checks
    from infra.stack import JoinerStack

    merged = {**cdk_json_context(), **dict(context or {})}
    app = App(context=merged, outdir=outdir)
    config = JoinerConfig.from_context(app.node.try_get_context)
    JoinerStack(app, config=config, layer_bundler=layer_bundler)
    add_nag_checks(app)
    return app


def _parse_context(pairs: list[str]) -> dict[str, str]:
    context: dict[str, str] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"infra.synth: -c expects KEY=VALUE, got {pair!r}")
        context[key] = value
    return context


def main(argv: list[str] | None = None) -> int:
    from infra.config import ConfigError

    parser = argparse.ArgumentParser(prog="python -m infra.synth", description="Synthesize the Joiner stack (runs cdk-nag).")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-bundling", action="store_true", help="skip the layer's pip bundling (offline)")
    parser.add_argument("--out", default=str(REPOSITORY_ROOT / "cdk.out"))
    args = parser.parse_args(argv)
    context: dict[str, Any] = _parse_context(args.context)
    if "clusterName" not in context and "clusterName" not in cdk_json_context():
        context["clusterName"] = "example"
        print("infra.synth: no clusterName given; using 'example' (-c clusterName=<cluster>)", file=sys.stderr)
    if args.no_bundling:
        context.update(SKIP_BUNDLING)
    started = time.monotonic()
    try:
        app = build_app(context, outdir=args.out)
        assembly = app.synth()
    except ConfigError as error:
        print(f"infra.synth: {error}", file=sys.stderr)
        return 2
    for stack in assembly.stacks:
        print(f"{stack.stack_name}: {Path(assembly.directory) / stack.template_file}")
    print(f"synthesized in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
