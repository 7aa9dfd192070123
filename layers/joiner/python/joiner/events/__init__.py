"""Ingestion of EC2 and AWS Health events: powertools parser models per (source,
detail-type) and normalisation to :class:`joiner.domain.interruption.InterruptionEvent`."""

from joiner.events.normalize import UnparseableEvent, normalize, normalize_body, parse_time

__all__ = ["UnparseableEvent", "normalize", "normalize_body", "parse_time"]
