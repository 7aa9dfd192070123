"""Interruption function: SQS batches of raw EventBridge events (spot interruption
warnings, rebalance recommendations, instance state changes, capacity reservation
interruption warnings, AWS Health scheduled changes).

Per message: parse and normalise (powertools parser models), then act through
:func:`joiner.services.interruption.handle_interruption`, idempotently on the EventBridge
event id (powertools Idempotency, DynamoDB idempotency table). The records of a batch are
handled concurrently (they share one :class:`~joiner.services.interruption.ClusterView`);
their outcomes are reported through powertools' batch processor. Partial batch responses:

* messages that cannot be parsed or interpreted (not JSON, over the size, depth or number
  bounds of :func:`joiner.events.parse_body`, an unknown type, a missing field, a time
  outside the window :mod:`joiner.events.normalization` accepts): logged with their message id,
  counted (``InterruptionUnparseable``) and acknowledged, never retried. Reading a record
  is isolated: whatever goes wrong there is this record's alone, never its batch's;
* events for instances Joiner does not manage: acknowledged and counted
  (``InterruptionUnmanaged``);
* a message whose processing fails before its node's drain is recorded (Kubernetes or
  EC2 error after retries reading the cluster, a node's termination lease busy for an
  event without a deadline; an urgent event whose cordon or first step fails leaves a
  termination request instead): reported in ``batchItemFailures``, its visibility cut to
  5, 10, 20, 40 s by receive count (:func:`joiner.adapters.queue.redeliver_sooner`) so
  SQS redelivers it within seconds, not after the visibility timeout; after 5 receives
  the redrive policy moves it to the dead-letter queue.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from joiner.observability import handler_entry, logger, set_trace_entity, trace_entity

#: Idempotency records live this long: far beyond SQS redelivery (visibility timeout x 5 receives).
IDEMPOTENCY_TTL_SECONDS = 24 * 3600
#: Records of one batch handled at once.
MAX_CONCURRENCY = 10

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

#: Built on the first invocation (cold start), reused while the execution environment lives.
_cold: dict[str, Any] = {}


def configure(runtime: Any = None, *, dynamodb_client: Any = None) -> dict[str, Any]:
    """Build the cold-start objects: the runtime (default: from the environment's settings)
    and the idempotent event processor on the idempotency table. Called on the first
    invocation; tests call it with a runtime of their own."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    if runtime is None:
        from joiner.services.context import build_runtime
        from joiner.settings import get_settings

        runtime = build_runtime(get_settings())
    persistence = DynamoDBPersistenceLayer(
        table_name=runtime.settings.idempotency_table,
        key_attr="id",
        expiry_attr="expiration",
        boto3_client=dynamodb_client or runtime.aws_client("dynamodb"),
    )
    config = IdempotencyConfig(event_key_jmespath="id", raise_on_no_idempotency_key=True, expires_after_seconds=IDEMPOTENCY_TTL_SECONDS)

    @idempotent_function(data_keyword_argument="event", persistence_store=persistence, config=config)  # type: ignore[untyped-decorator]  # powertools leaves it untyped
    def process_event(event: dict[str, Any], view: Any = None) -> dict[str, Any]:
        """Act on one EventBridge event once per event id (``view``: the batch's shared
        cluster reads; not part of the key); the returned summary is what a duplicate
        delivery gets back."""
        from joiner.events import normalize
        from joiner.services.interruption import handle_interruption

        outcome = handle_interruption(runtime, normalize(event), view=view)
        return outcome.to_dict()

    _cold.clear()
    _cold.update(runtime=runtime, config=config, process_event=process_event)
    return _cold


def _cold_start() -> dict[str, Any]:
    return _cold if _cold else configure()


def reset() -> None:
    """Forget the cold-start objects (tests: new settings, new endpoints)."""
    _cold.clear()


def read_record(body: object, now: Any) -> tuple[dict[str, Any], Any]:
    """The event dict and its normalised form, or :class:`joiner.events.UnparseableEvent`
    for anything that cannot be parsed or interpreted (an unexpected error while reading
    is wrapped too: a poison message must never be retried into the dead-letter queue)."""
    from joiner.events import UnparseableEvent, normalize, parse_body

    try:
        event = parse_body(body)
        return event, normalize(event, now=now)
    except UnparseableEvent:
        raise
    except Exception as error:  # see the docstring; logged with its type by the caller
        raise UnparseableEvent(f"unexpected {type(error).__name__} while reading the event: {error}") from error


def record_handler(record: SQSRecord, view: Any = None) -> dict[str, Any]:
    """Handle one SQS record: acknowledge what cannot be parsed, act idempotently on the rest
    (``view``: the batch's :class:`~joiner.services.replacement.ClusterView`)."""
    from joiner.events import UnparseableEvent

    cold = _cold_start()
    runtime = cold["runtime"]
    try:
        event, _ = read_record(record.raw_event.get("body"), runtime.clock.now())
    except UnparseableEvent as error:
        runtime.count("InterruptionUnparseable")
        logger.warning("unparseable interruption message acknowledged", extra={"message_id": record.message_id, "error": str(error)[:1000]})
        return {"messageId": record.message_id, "status": "unparseable"}
    try:
        summary: dict[str, Any] = cold["process_event"](event=event, view=view)
    except Exception:
        _redeliver_sooner(runtime, record)
        raise
    return summary


def _redeliver_sooner(runtime: Any, record: SQSRecord) -> None:
    """A record whose handling failed comes back within seconds (5, 10, 20, ... s by receive
    count), not after the queue's visibility timeout: a spot warning gives two minutes."""
    from joiner.adapters.queue import redeliver_sooner

    try:
        receive_count = int(record.attributes.approximate_receive_count or 1)
    except (TypeError, ValueError):
        receive_count = 1
    delay = redeliver_sooner(runtime.aws_client("sqs"), runtime.settings.interruption_queue_url, record.receipt_handle, receive_count)
    runtime.count("InterruptionRetried")
    logger.warning(
        "interruption message failed; redelivered sooner", extra={"message_id": record.message_id, "receive_count": receive_count, "redelivered_in": delay}
    )


def _replay(record: SQSRecord, outcomes: dict[str, Future[dict[str, Any]]], view: Any) -> dict[str, Any]:
    """The outcome of a record already handled concurrently (its exception re-raised, so the
    batch processor reports it as a batch item failure)."""
    future = outcomes.get(record.message_id)
    if future is None:
        return record_handler(record, view)
    replayed: dict[str, Any] = future.result()
    return replayed


def _handle_concurrently(records: list[dict[str, Any]], view: Any) -> dict[str, Future[dict[str, Any]]]:
    """Run the batch's records on worker threads: each event waits mostly on Kubernetes,
    EC2 and DynamoDB calls. The X-Ray trace entity, when tracing, is carried into the threads."""
    entity = trace_entity()

    def run(raw: dict[str, Any]) -> dict[str, Any]:
        set_trace_entity(entity)
        return record_handler(SQSRecord(raw), view)

    workers = min(MAX_CONCURRENCY, len(records))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="joiner-interruption") as pool:
        return {str(raw.get("messageId")): pool.submit(run, raw) for raw in records}


def _instances_named(records: list[dict[str, Any]], now: Any) -> list[str]:
    """Instances the batch's parseable events would take away (for replacement planning)."""
    from joiner.domain.interruption import NOOP
    from joiner.events import UnparseableEvent

    found: list[str] = []
    for raw in records:
        try:
            _, event = read_record(raw.get("body"), now)
        except UnparseableEvent:
            continue
        if event.kind != NOOP:
            found.extend(event.instance_ids)
    return sorted(set(found))


@handler_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    from joiner.services.replacement import ClusterView

    cold = _cold_start()
    cold["config"].register_lambda_context(context)
    runtime = cold["runtime"]
    runtime.invocation_id = getattr(context, "aws_request_id", runtime.invocation_id)
    view = ClusterView(runtime)
    records = [r for r in event.get("Records") or [] if isinstance(r, dict)]
    going = _instances_named(records, runtime.clock.now())
    if len(going) > 1:
        try:
            view.expect_disruption(going)
        except Exception as error:  # noqa: BLE001 - an optimisation of replacement planning, never a reason to fail the batch
            logger.warning("could not read the batch's nodes up front", extra={"error": str(error)})
    outcomes = _handle_concurrently(records, view) if len(records) > 1 else {}
    return process_partial_response(event=event, record_handler=lambda record: _replay(record, outcomes, view), processor=processor, context=context)
