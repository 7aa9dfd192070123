"""Typed settings, read once per cold start (``get_settings()``), never at import time."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Settings", "SettingsError", "get_settings"]


class SettingsError(ValueError):
    """A missing or malformed environment setting."""


@dataclass(frozen=True, slots=True)
class Settings:
    cluster_name: str
    region: str
    state_table: str
    idempotency_table: str
    interruption_queue_url: str = ""
    work_queue_url: str = ""
    scanner_mode: str = "responsive"  # "responsive" | "economy"
    scan_window_seconds: float = 55.0
    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    kubernetes_host: str = ""  # local runs: API server URL instead of EKS DescribeCluster
    kubernetes_token: str = ""
    kubernetes_ca_file: str = ""
    kubernetes_insecure: bool = False
    aws_endpoint_url: str = ""  # local runs: moto server
    node_role: str = ""  # default node role when a NodeClass names none
    scanner_function: str = ""  # the watcher wakes this function (the scanner's name)
    #: ``kubectl delete nodeclaim/node`` drains through Joiner's finalizer (off: the finalizers are removed)
    delete_to_drain: bool = True
    #: also read Karpenter's karpenter.sh/v1 NodePools and karpenter.k8s.aws/v1 EC2NodeClasses, converted
    karpenter_crds: bool = False
    #: the bucket holding the cluster state's image (cold containers restore it instead of listing)
    state_bucket: str = ""
    #: local runs: a directory instead of the bucket
    state_dir: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def required(name: str) -> str:
            value = env.get(name, "").strip()
            if not value:
                raise SettingsError(f"environment variable {name} is required")
            return value

        def number(name: str, default: float) -> float:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SettingsError(f"environment variable {name} must be a number, got {raw!r}") from None
            if value < 0:
                raise SettingsError(f"environment variable {name} must not be negative")
            return value

        mode = env.get("JOINER_SCANNER_MODE", "responsive").strip() or "responsive"
        if mode not in ("responsive", "economy"):
            raise SettingsError(f"JOINER_SCANNER_MODE must be 'responsive' or 'economy', got {mode!r}")
        return cls(
            cluster_name=required("JOINER_CLUSTER_NAME"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            state_table=required("JOINER_STATE_TABLE"),
            idempotency_table=env.get("JOINER_IDEMPOTENCY_TABLE", "").strip() or required("JOINER_STATE_TABLE"),
            interruption_queue_url=env.get("JOINER_INTERRUPTION_QUEUE_URL", ""),
            work_queue_url=env.get("JOINER_WORK_QUEUE_URL", ""),
            scanner_mode=mode,
            scan_window_seconds=number("JOINER_SCAN_WINDOW_SECONDS", 55.0),
            batch_idle_seconds=number("JOINER_BATCH_IDLE_SECONDS", 1.0),
            batch_max_seconds=number("JOINER_BATCH_MAX_SECONDS", 10.0),
            kubernetes_host=env.get("JOINER_KUBERNETES_HOST", ""),
            kubernetes_token=env.get("JOINER_KUBERNETES_TOKEN", ""),
            kubernetes_ca_file=env.get("JOINER_KUBERNETES_CA_FILE", ""),
            kubernetes_insecure=env.get("JOINER_KUBERNETES_INSECURE", "").lower() in ("1", "true", "yes"),
            aws_endpoint_url=env.get("JOINER_AWS_ENDPOINT_URL", ""),
            node_role=env.get("JOINER_NODE_ROLE", ""),
            scanner_function=env.get("JOINER_PLANNER_FUNCTION", ""),
            delete_to_drain=env.get("JOINER_DELETE_TO_DRAIN", "true").strip().lower() not in ("0", "false", "no"),
            karpenter_crds=env.get("JOINER_KARPENTER_CRDS", "").strip().lower() in ("1", "true", "yes"),
            state_bucket=env.get("JOINER_STATE_BUCKET", "").strip(),
            state_dir=env.get("JOINER_STATE_DIR", "").strip(),
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings for this execution environment, read on first use (cold start)."""
    return Settings.from_env()
