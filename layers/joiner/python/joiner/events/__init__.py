"""Ingestion of EC2 and AWS Health events: powertools parser models per (source,
detail-type) and normalisation to :class:`joiner.domain.interruption.InterruptionEvent`.

The names below are loaded from :mod:`joiner.events.normalization` on first access, so
importing :mod:`joiner.events.scheduled` (every scheduled function does) does not import
pydantic and the parser models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joiner.events.normalization import (
        UnparseableEvent,
        normalize,
        normalize_body,
        parse_body,
        parse_time,
    )

__all__ = ["UnparseableEvent", "normalize", "normalize_body", "parse_body", "parse_time"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("joiner.events.normalization"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
