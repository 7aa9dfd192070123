"""The real control plane (moved to :mod:`testworld.real_kube`, which the simulator's real mode
and ``joiner demo --kube real`` use too)."""

from testworld.real_kube import (
    ADMIN,
    NO_GO,
    ROOT,
    SCHEDULER,
    Api,
    ApiError,
    AuditedRequest,
    AuditLog,
    ControlPlane,
    Identity,
    RealCluster,
    build,
    manifests,
    new_token,
    object_path,
)

__all__ = ["ADMIN", "NO_GO", "ROOT", "SCHEDULER", "Api", "ApiError", "AuditLog", "AuditedRequest", "ControlPlane", "Identity",
           "RealCluster", "build", "manifests", "new_token", "object_path"]
