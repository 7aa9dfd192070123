"""DynamoDB state: node claims, NodePool limit reservations, leases, unavailable offerings and
generic records, in one table (design and access patterns: docs/aws.md).

Implements :class:`joiner.ports.StatePort` over a boto3 DynamoDB ``Table`` resource. Every write
that must not be lost or doubled under retries and concurrency is a conditional write; nothing is
read-modify-written without a condition that detects a concurrent change.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields as dataclass_fields
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from boto3.dynamodb.conditions import Attr, Key
from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import BotoCoreError, ClientError

from joiner.domain.model import OfferingKey
from joiner.domain.resources import Resources
from joiner.ports import ClaimNotFound, ClaimRecord, ClaimState, ClaimStateConflict, Clock, JsonDict, StateError

__all__ = [
    "StateAdapter",
    "StateError",
    "ClaimNotFound",
    "ClaimStateConflict",
    "CLOSED_CLAIM_RETENTION",
    "RESERVED_KINDS",
    "BY_OPEN_CLAIM",
    "OPEN_INDEX_SETTLE",
]

T = TypeVar("T")

#: Closed claims stay readable this long (explanations, debugging), then DynamoDB TTL removes them.
CLOSED_CLAIM_RETENTION = timedelta(days=1)
CLAIM, POOL, LEASE, UNAVAILABLE, MIGRATION = "CLAIM", "POOL", "LEASE", "UNAVAILABLE", "MIGRATION"
RESERVED_KINDS = frozenset({CLAIM, POOL, LEASE, UNAVAILABLE, MIGRATION})
BY_INSTANCE = "byInstance"
BY_NODE_POOL = "byNodePool"
#: Sparse GSI of the open claims: partition ``openClaim`` (always :data:`_OPEN`, present only
#: while a claim is not closed), sort ``pk``.
BY_OPEN_CLAIM = "byOpenClaim"
_OPEN_ATTRIBUTE, _OPEN = "openClaim", "OPEN"
#: A reservation item's sort key under its pool's partition: ``RES#<claim id>``.
_RESERVATION = "RES#"
#: How long after the first read of a table (the marker ``MIGRATION#openClaim``) open claims
#: are still found by a consistent Scan that also backfills ``openClaim`` on claims written by
#: an older version; longer than any deployment during which an older function still runs.
OPEN_INDEX_SETTLE = timedelta(hours=1)
#: Claims this adapter wrote within this window are re-read by id (strongly consistent) on top
#: of the eventually consistent index: a round sees its own and the previous round's claims.
_RECENT_WRITES = timedelta(minutes=2)
_RECENT_LIMIT = 500
#: The partition of the claims created within :data:`_RECENT_WRITES`, by any container: one
#: small item each (sort key ``<written at>#<claim id>``), written before its claim and read by
#: :meth:`StateAdapter.open_claims` with a strongly consistent Query, so a claim created
#: moments ago elsewhere is found while the eventually consistent index does not show it yet.
#: What it holds follows the rate of new claims, not the cluster; TTL removes old items.
_RECENT_CLAIMS = "RECENT#CLAIM"
#: Items per TransactGetItems (DynamoDB allows 100; moto and older endpoints 25).
_GET_CHUNK = 25
#: TransactWriteItems attempts when DynamoDB cancels for a concurrent transaction on the same item.
_TRANSACT_ATTEMPTS = 8
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_DESERIALIZER = TypeDeserializer()

# ClaimRecord field -> item attribute. claim_id is the key and never updated.
_CLAIM_ATTRIBUTES = {
    "claim_id": "claimId",
    "node_pool": "nodePool",
    "state": "state",
    "created_at": "createdAt",
    "instance_id": "instanceId",
    "instance_type": "instanceType",
    "zone": "zone",
    "capacity_type": "capacityType",
    "price": "price",
    "pods": "pods",
    "node_name": "nodeName",
    "reserved": "reserved",
    "launched_at": "launchedAt",
    "registered_at": "registeredAt",
    "initialized_at": "initializedAt",
    "closed_at": "closedAt",
    "node_lost_at": "nodeLostAt",
    "reason": "reason",
    "pool_hash": "poolHash",
    "class_hash": "classHash",
}
_REQUIRED_CLAIM_FIELDS = ("node_pool", "state", "created_at")
_DATETIME_FIELDS = frozenset({"created_at", "launched_at", "registered_at", "initialized_at", "closed_at", "node_lost_at"})
assert set(_CLAIM_ATTRIBUTES) == {f.name for f in dataclass_fields(ClaimRecord)}


def _expected_states(claim_id: str, expected: str | tuple[str, ...] | None) -> tuple[str, ...] | None:
    if expected is None:
        return None
    states = (expected,) if isinstance(expected, str) else tuple(expected)
    if not states or not all(isinstance(state, str) and state for state in states):
        raise StateError(f"update_claim({claim_id}): expected_state must be a state or a non-empty tuple of states")
    return tuple(dict.fromkeys(str(state) for state in states))


def _epoch_ceil(moment: datetime) -> int:
    return math.ceil(moment.timestamp())


def _sortable(moment: datetime) -> str:
    """``moment`` in UTC as a fixed-width string that sorts as time does."""
    return _aware(moment, "time").astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch_floor(moment: datetime) -> int:
    return math.floor(moment.timestamp())


def _aware(moment: datetime, where: str) -> datetime:
    if moment.tzinfo is None:
        raise StateError(f"{where}: datetime must be timezone-aware")
    return moment


def _resources_to_item(resources: Mapping[str, int]) -> dict[str, int]:
    return {name: int(value) for name, value in sorted(resources.items())}


def _resources_from_item(raw: Mapping[str, Any] | None) -> Resources:
    return Resources({name: int(value) for name, value in (raw or {}).items()})


class _Cancelled(Exception):
    """A TransactWriteItems DynamoDB cancelled: one reason per action, in order."""

    def __init__(self, reasons: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(", ".join(str(reason.get("Code", "None")) for reason in reasons))
        self.codes = [str(reason.get("Code") or "None") for reason in reasons]
        self.items = [{name: _DESERIALIZER.deserialize(value) for name, value in reason["Item"].items()} if reason.get("Item") else None for reason in reasons]

    def failed(self, index: int) -> bool:
        return index < len(self.codes) and self.codes[index] == "ConditionalCheckFailed"

    @property
    def conflict(self) -> bool:
        """Cancelled for something other than a condition (a concurrent transaction, throttling): retry."""
        return not any(code == "ConditionalCheckFailed" for code in self.codes)


_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


def _used_only(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` with only the expression attribute names and values its expressions use
    (DynamoDB refuses unused ones); empty maps are left out."""
    used = set()
    for field in ("UpdateExpression", "ConditionExpression", "KeyConditionExpression", "FilterExpression", "ProjectionExpression"):
        used.update(_PLACEHOLDER.findall(str(request.get(field, ""))))
    out = dict(request)
    for field in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        kept = {key: value for key, value in dict(request.get(field) or {}).items() if key in used}
        if kept:
            out[field] = kept
        else:
            out.pop(field, None)
    return out


def _subtract_checked(held: Mapping[str, int], subtract: Mapping[str, int], entry: str) -> tuple[dict[str, str], dict[str, Any], list[str], list[str]]:
    """The parts of a "subtract and check the amount read" write: per resource of ``held``
    (the amounts read at ``entry``, an attribute path such as ``#amount`` or ``#claims.#cid``)
    a condition that ``entry`` still holds it, and per resource of ``subtract`` an assignment
    lowering the pool's ``reserved`` total by that much. Returns the expression attribute
    names and values, the assignments and the conditions."""
    names: dict[str, str] = {"#reserved": "reserved"}
    values: dict[str, Any] = {}
    sets: list[str] = []
    conditions: list[str] = []
    for index, resource in enumerate(sorted(held)):
        names[f"#r{index}"] = resource
        values[f":h{index}"] = held[resource]
        conditions.append(f"{entry}.#r{index} = :h{index}")
        if resource in subtract:
            values[f":d{index}"] = subtract[resource]
            sets.append(f"#reserved.#r{index} = #reserved.#r{index} - :d{index}")
    return names, values, sets, conditions


class StateAdapter:
    """:class:`joiner.ports.StatePort` over one DynamoDB table (``pk``/``sk`` keys, GSIs
    ``byInstance``, ``byNodePool`` and ``byOpenClaim``, TTL attribute ``expiresAt``)."""

    def __init__(
        self,
        table: Any,
        clock: Clock,
        *,
        closed_retention: timedelta = CLOSED_CLAIM_RETENTION,
        open_index_settle: timedelta = OPEN_INDEX_SETTLE,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._table = table
        self._clock = clock
        self._closed_retention = closed_retention
        self._open_index_settle = open_index_settle
        self._open_index_ready = False
        self._sleep = sleep
        #: claim id -> when this adapter last wrote it (read-your-writes over the index)
        self._recent: dict[str, datetime] = {}

    # ------------------------------------------------------------ plumbing

    def _call(self, operation: str, function: Callable[..., T], **kwargs: Any) -> T:
        try:
            return function(**kwargs)
        except ClientError as error:
            info = error.response.get("Error", {})
            code = str(info.get("Code", "Unknown"))
            if code == "ConditionalCheckFailedException":
                raise
            raise StateError(f"DynamoDB {operation} failed: {code}: {info.get('Message', '')}", code=code) from error
        except BotoCoreError as error:
            raise StateError(f"DynamoDB {operation} failed: {error}", code=type(error).__name__) from error

    @staticmethod
    def _is_conditional_failure(error: ClientError) -> bool:
        return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"

    @staticmethod
    def _old_item(error: ClientError) -> dict[str, Any] | None:
        """The item as it was when the condition failed (ReturnValuesOnConditionCheckFailure)."""
        raw = error.response.get("Item")
        if not raw or not isinstance(raw, Mapping):
            return None
        return {name: _DESERIALIZER.deserialize(value) for name, value in raw.items()}

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        response = self._call("GetItem", self._table.get_item, Key={"pk": pk, "sk": sk}, ConsistentRead=True)
        item: dict[str, Any] | None = response.get("Item")
        return item

    def _query(self, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            response = self._call("Query", self._table.query, **kwargs)
            items.extend(response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                return items
            kwargs["ExclusiveStartKey"] = start

    def _transact(self, operation: str, actions: list[dict[str, Any]]) -> None:
        """One TransactWriteItems (``actions``: ``{"Put"|"Update"|"Delete": {...}}`` with plain
        Python values, which the Table resource's client serialises; the table name is added
        here). Raises :class:`_Cancelled`
        when DynamoDB cancelled it; botocore's idempotency token makes its own retries safe."""
        items = []
        for action in actions:
            ((kind, body),) = action.items()
            wired: dict[str, Any] = {"TableName": self._table.name}
            wired.update(_used_only(body))
            items.append({kind: wired})
        client = self._table.meta.client
        try:
            client.transact_write_items(TransactItems=items)
        except ClientError as error:
            info = error.response.get("Error", {})
            code = str(info.get("Code", "Unknown"))
            if code == "TransactionCanceledException":
                reasons = error.response.get("CancellationReasons")
                if reasons is None:  # some botocore versions keep them in the raw error only
                    reasons = [{"Code": part.strip()} for part in str(info.get("Message", "")).partition("[")[2].rstrip("]").split(",")]
                raise _Cancelled(reasons) from None
            raise StateError(f"DynamoDB TransactWriteItems ({operation}) failed: {code}: {info.get('Message', '')}", code=code) from error
        except BotoCoreError as error:
            raise StateError(f"DynamoDB TransactWriteItems ({operation}) failed: {error}", code=type(error).__name__) from error

    def _backoff(self, attempt: int) -> None:
        self._sleep(random.uniform(0, 0.025 * 2 ** min(attempt, 5)))  # noqa: S311 - jitter, not security

    def _scan(self, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            response = self._call("Scan", self._table.scan, **kwargs)
            items.extend(response.get("Items", []))
            start = response.get("LastEvaluatedKey")
            if not start:
                return items
            kwargs["ExclusiveStartKey"] = start

    def _expired(self, item: Mapping[str, Any], now: datetime | None = None) -> bool:
        """TTL deletion is lazy (up to days late): an item past ``expiresAt`` is treated as gone."""
        expires = item.get("expiresAt")
        if expires is None:
            return False
        return int(expires) <= _epoch_floor(now or self._clock.now())

    # ------------------------------------------------------------ claims

    @staticmethod
    def _claim_key(claim_id: str) -> dict[str, str]:
        if not claim_id:
            raise StateError("claim id is empty")
        return {"pk": f"{CLAIM}#{claim_id}", "sk": CLAIM}

    @staticmethod
    def _encode_claim_value(name: str, value: Any) -> Any:
        if name in _DATETIME_FIELDS:
            if not isinstance(value, datetime):
                raise StateError(f"claim field {name} must be a datetime, got {type(value).__name__}")
            return _aware(value, f"claim field {name}").astimezone(UTC).isoformat()
        if name == "reserved":
            if not isinstance(value, Mapping):
                raise StateError("claim field reserved must be a Resources mapping")
            return _resources_to_item(value)
        if name == "pods":
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise StateError("claim field pods must be a sequence of pod keys")
            return [str(pod) for pod in value]
        if name == "state" and isinstance(value, str):
            return str(value)  # a ClaimState is stored as its plain string
        if name == "price":
            return Decimal(repr(float(value)))
        if not isinstance(value, str):
            raise StateError(f"claim field {name} must be a string, got {type(value).__name__}")
        return value

    def _claim_expiry(self, closed_at: datetime | None) -> int:
        return _epoch_ceil((closed_at or self._clock.now()) + self._closed_retention)

    def _claim_item(self, claim: ClaimRecord) -> dict[str, Any]:
        item: dict[str, Any] = dict(self._claim_key(claim.claim_id))
        for name, attribute in _CLAIM_ATTRIBUTES.items():
            value = getattr(claim, name)
            if value is None or (name in ("instance_id", "node_name", "instance_type", "zone", "capacity_type") and value == ""):
                continue
            if name in ("reason", "pool_hash", "class_hash") and value == "":
                continue
            if name == "pods" and not value:
                continue
            if name == "reserved" and not value:
                continue
            item[attribute] = self._encode_claim_value(name, value)
        if claim.state == ClaimState.CLOSED:
            item["expiresAt"] = self._claim_expiry(claim.closed_at)
        else:
            item[_OPEN_ATTRIBUTE] = _OPEN
        return item

    @staticmethod
    def _claim_from_item(item: Mapping[str, Any]) -> ClaimRecord:
        def when(attribute: str) -> datetime | None:
            raw = item.get(attribute)
            return datetime.fromisoformat(raw) if raw else None

        price = item.get("price")
        return ClaimRecord(
            claim_id=str(item["claimId"]),
            node_pool=str(item["nodePool"]),
            state=str(item["state"]),
            created_at=when("createdAt") or datetime.fromtimestamp(0, UTC),
            instance_id=item.get("instanceId"),
            instance_type=item.get("instanceType"),
            zone=item.get("zone"),
            capacity_type=item.get("capacityType"),
            price=float(price) if price is not None else None,
            pods=tuple(item.get("pods", ())),
            node_name=item.get("nodeName"),
            reserved=_resources_from_item(item.get("reserved")),
            launched_at=when("launchedAt"),
            registered_at=when("registeredAt"),
            initialized_at=when("initializedAt"),
            closed_at=when("closedAt"),
            node_lost_at=when("nodeLostAt"),
            reason=str(item.get("reason", "")),
            pool_hash=str(item.get("poolHash", "")),
            class_hash=str(item.get("classHash", "")),
        )

    def put_claim(self, claim: ClaimRecord) -> bool:
        """Create the claim; False (nothing written) when the id already exists. Its entry in
        :data:`_RECENT_CLAIMS` is written first: a reader finds every claim that exists."""
        item = self._claim_item(claim)
        self._wrote(claim.claim_id)
        now = self._clock.now()
        self._call(
            "PutItem",
            self._table.put_item,
            Item={
                "pk": _RECENT_CLAIMS,
                "sk": f"{_sortable(now)}#{claim.claim_id}",
                "claimId": claim.claim_id,
                "expiresAt": _epoch_ceil(now + _RECENT_WRITES + timedelta(hours=1)),
            },
        )
        try:
            self._call("PutItem", self._table.put_item, Item=item, ConditionExpression=Attr("pk").not_exists())
        except ClientError as error:
            if self._is_conditional_failure(error):
                return False
            raise
        return True

    def update_claim(self, claim_id: str, *, expected_state: str | tuple[str, ...] | None = None, **fields: Any) -> ClaimRecord:
        """Set the given ClaimRecord fields (``None`` or ``""`` removes an optional one) and
        return the updated claim. Closing a claim (``state=ClaimState.CLOSED``) schedules its deletion
        after the retention period. Raises :class:`ClaimNotFound` for an unknown id.

        ``expected_state`` (a state or a tuple of states) makes the write conditional on the
        claim's current state (``#state IN (...)``, checked atomically by DynamoDB): when a
        concurrent transition moved it elsewhere, nothing is written and
        :class:`ClaimStateConflict` carries the claim as it is now."""
        unknown = sorted(set(fields) - set(_CLAIM_ATTRIBUTES))
        if unknown or "claim_id" in fields:
            raise StateError(f"update_claim({claim_id}): unknown or immutable field(s) {unknown or ['claim_id']}")
        expected = _expected_states(claim_id, expected_state)
        if not fields:
            claim = self.get_claim(claim_id)
            if claim is None:
                raise ClaimNotFound(claim_id)
            if expected is not None and claim.state not in expected:
                raise ClaimStateConflict(claim_id, expected, claim)
            return claim
        sets: list[str] = []
        removes: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        for index, (name, value) in enumerate(sorted(fields.items())):
            placeholder = f"#f{index}"
            names[placeholder] = _CLAIM_ATTRIBUTES[name]
            empty = value is None or value == "" or (name in ("pods", "reserved") and not value)
            if empty:
                if name in _REQUIRED_CLAIM_FIELDS:
                    raise StateError(f"update_claim({claim_id}): field {name} cannot be removed")
                removes.append(placeholder)
            else:
                sets.append(f"{placeholder} = :v{index}")
                values[f":v{index}"] = self._encode_claim_value(name, value)
        if "state" in fields:
            names["#exp"], names["#open"] = "expiresAt", _OPEN_ATTRIBUTE
        if fields.get("state") == ClaimState.CLOSED:
            sets.append("#exp = :expires")
            values[":expires"] = self._claim_expiry(fields.get("closed_at"))
            removes.append("#open")
        elif "state" in fields:
            removes.append("#exp")
            sets.append("#open = :open")
            values[":open"] = _OPEN
        expression = ""
        if sets:
            expression += "SET " + ", ".join(sets)
        if removes:
            expression += (" " if expression else "") + "REMOVE " + ", ".join(removes)
        condition = "attribute_exists(pk)"
        if expected is not None:
            names["#state"] = _CLAIM_ATTRIBUTES["state"]
            placeholders = []
            for index, state in enumerate(expected):
                values[f":expected{index}"] = state
                placeholders.append(f":expected{index}")
            condition += f" AND #state IN ({', '.join(placeholders)})"
        kwargs: dict[str, Any] = {
            "Key": self._claim_key(claim_id),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValues": "ALL_NEW",
        }
        if expected is not None:
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        if values:
            kwargs["ExpressionAttributeValues"] = values
        self._wrote(claim_id)
        try:
            response = self._call("UpdateItem", self._table.update_item, **kwargs)
        except ClientError as error:
            if self._is_conditional_failure(error):
                if expected is None:
                    raise ClaimNotFound(claim_id) from None
                # ALL_OLD: the claim as it was when the check failed; no item means it does
                # not exist (a consistent read settles the rare case the item is missing).
                old = self._old_item(error)
                current = self._claim_from_item(old) if old else self.get_claim(claim_id)
                if current is None:
                    raise ClaimNotFound(claim_id) from None
                raise ClaimStateConflict(claim_id, expected, current) from None
            raise
        return self._claim_from_item(response["Attributes"])

    def get_claim(self, claim_id: str) -> ClaimRecord | None:
        key = self._claim_key(claim_id)
        item = self._get(key["pk"], key["sk"])
        return self._claim_from_item(item) if item else None

    def claim_by_instance(self, instance_id: str) -> ClaimRecord | None:
        """The claim that launched ``instance_id`` (GSI ``byInstance``; eventually consistent, so
        a claim updated milliseconds ago may not be found yet). Open claims win over closed."""
        items = self._query(IndexName=BY_INSTANCE, KeyConditionExpression=Key("instanceId").eq(instance_id))
        claims = [self._claim_from_item(item) for item in items if item.get("sk") == CLAIM]
        if not claims:
            return None
        return max(claims, key=lambda c: (c.state != ClaimState.CLOSED, c.created_at, c.claim_id))

    def claims_by_node_pool(self, node_pool: str) -> list[ClaimRecord]:
        """Claims of a NodePool, open and recently closed (GSI ``byNodePool``), by (created, id)."""
        items = self._query(
            IndexName=BY_NODE_POOL,
            KeyConditionExpression=Key("nodePool").eq(node_pool) & Key("sk").eq(CLAIM),
        )
        claims = [self._claim_from_item(item) for item in items]
        return sorted(claims, key=lambda c: (c.created_at, c.claim_id))

    def open_claims(self) -> list[ClaimRecord]:
        """Claims not closed, by (created, id): a Query of the sparse GSI ``byOpenClaim``
        (eventually consistent), with the claims this adapter wrote in the last
        :data:`_RECENT_WRITES` re-read by id (TransactGetItems, strongly consistent), so a round
        always sees what it and the previous rounds of this container wrote.

        For :data:`OPEN_INDEX_SETTLE` after the table's first read by this version (the marker
        ``MIGRATION#openClaim``), open claims are found as before, by a strongly consistent
        Scan, which also sets ``openClaim`` on open claims an older version wrote."""
        if not self._open_index_is_ready():
            return self._scan_open_claims()
        items = self._query(IndexName=BY_OPEN_CLAIM, KeyConditionExpression=Key(_OPEN_ATTRIBUTE).eq(_OPEN))
        by_id = {str(item["claimId"]): item for item in items if item.get("sk") == CLAIM}
        for claim_id, item in self._recently_written().items():
            if item is None:
                by_id.pop(claim_id, None)
            else:
                by_id[claim_id] = item
        for claim_id, item in self._read_claims(sorted(self._created_recently() - set(by_id) - set(self._recent))).items():
            if item is not None:
                by_id[claim_id] = item
        claims = [self._claim_from_item(item) for item in by_id.values() if item.get("state") != ClaimState.CLOSED]
        return sorted(claims, key=lambda c: (c.created_at, c.claim_id))

    def _created_recently(self) -> set[str]:
        """Ids of the claims any container created within :data:`_RECENT_WRITES` (consistent)."""
        horizon = _sortable(self._clock.now() - _RECENT_WRITES)
        items = self._query(KeyConditionExpression=Key("pk").eq(_RECENT_CLAIMS) & Key("sk").gte(horizon), ConsistentRead=True)
        return {str(item["claimId"]) for item in items if item.get("claimId")}

    def _scan_open_claims(self) -> list[ClaimRecord]:
        items = self._scan(FilterExpression=Attr("sk").eq(CLAIM) & Attr("state").ne(ClaimState.CLOSED.value), ConsistentRead=True)
        for item in items:
            if item.get(_OPEN_ATTRIBUTE) != _OPEN:
                self._backfill_open(str(item["claimId"]))
        claims = [self._claim_from_item(item) for item in items]
        return sorted(claims, key=lambda c: (c.created_at, c.claim_id))

    def _backfill_open(self, claim_id: str) -> None:
        try:
            self._call(
                "UpdateItem",
                self._table.update_item,
                Key=self._claim_key(claim_id),
                UpdateExpression="SET #open = :open",
                ConditionExpression="attribute_exists(pk) AND #state <> :closed",
                ExpressionAttributeNames={"#open": _OPEN_ATTRIBUTE, "#state": "state"},
                ExpressionAttributeValues={":open": _OPEN, ":closed": ClaimState.CLOSED.value},
            )
        except ClientError as error:
            if not self._is_conditional_failure(error):
                raise

    def _open_index_is_ready(self) -> bool:
        """True once the marker is older than the settle period (then remembered)."""
        if self._open_index_ready:
            return True
        now = self._clock.now()
        key = {"pk": f"{MIGRATION}#{_OPEN_ATTRIBUTE}", "sk": MIGRATION}
        marker = self._get(key["pk"], key["sk"])
        if marker is None:
            try:
                self._call("PutItem", self._table.put_item, Item={**key, "since": now.astimezone(UTC).isoformat()}, ConditionExpression=Attr("pk").not_exists())
            except ClientError as error:
                if not self._is_conditional_failure(error):
                    raise
            since = now
        else:
            since = datetime.fromisoformat(str(marker["since"]))
        self._open_index_ready = since + self._open_index_settle <= now
        return self._open_index_ready

    def _wrote(self, claim_id: str) -> None:
        now = self._clock.now()
        self._recent.pop(claim_id, None)
        self._recent[claim_id] = now
        while len(self._recent) > _RECENT_LIMIT:
            del self._recent[next(iter(self._recent))]

    def _recently_written(self) -> dict[str, dict[str, Any] | None]:
        """Claim id -> its item now (None: gone) for the claims written within the window."""
        horizon = self._clock.now() - _RECENT_WRITES
        for claim_id in [claim_id for claim_id, when in self._recent.items() if when < horizon]:
            del self._recent[claim_id]
        return self._read_claims(sorted(self._recent))

    def _read_claims(self, ids: Sequence[str]) -> dict[str, dict[str, Any] | None]:
        """Claim id -> its item now (None: gone), strongly consistent (TransactGetItems)."""
        found: dict[str, dict[str, Any] | None] = dict.fromkeys(ids)
        client = self._table.meta.client
        for start in range(0, len(ids), _GET_CHUNK):
            chunk = ids[start : start + _GET_CHUNK]
            gets = [{"Get": {"TableName": self._table.name, "Key": self._claim_key(claim_id)}} for claim_id in chunk]
            for attempt in range(3):
                try:
                    response = self._call("TransactGetItems", client.transact_get_items, TransactItems=gets)
                except StateError as error:
                    if error.code != "TransactionCanceledException":
                        raise
                    self._backoff(attempt)  # a write to one of them was in flight
                    continue
                for answer in response.get("Responses", []):
                    raw = answer.get("Item")
                    if raw:
                        found[str(raw["claimId"])] = dict(raw)
                break
            else:  # kept conflicting: one consistent read each
                for claim_id in chunk:
                    key = self._claim_key(claim_id)
                    found[claim_id] = self._get(key["pk"], key["sk"])
        return found

    # ------------------------------------------------------------ limit reservations

    @staticmethod
    def _pool_key(node_pool: str) -> dict[str, str]:
        if not node_pool:
            raise StateError("node pool name is empty")
        return {"pk": f"{POOL}#{node_pool}", "sk": POOL}

    def _reservation_key(self, node_pool: str, claim_id: str) -> dict[str, str]:
        if not claim_id:
            raise StateError("claim id is empty")
        return {"pk": self._pool_key(node_pool)["pk"], "sk": f"{_RESERVATION}{claim_id}"}

    def _init_pool(self, node_pool: str) -> None:
        try:
            self._call(
                "PutItem",
                self._table.put_item,
                Item={**self._pool_key(node_pool), "nodePoolName": node_pool, "reserved": {}},
                ConditionExpression=Attr("pk").not_exists(),
            )
        except ClientError as error:
            if not self._is_conditional_failure(error):
                raise

    def _legacy_claims(self, node_pool: str) -> dict[str, Any]:
        """The ``claims`` map an older version kept in the pool item (drains as those claims
        are released or shrunk; nothing is added to it any more)."""
        key = self._pool_key(node_pool)
        item = self._get(key["pk"], key["sk"]) or {}
        return dict(item.get("claims") or {})

    def _held(self, node_pool: str, claim_id: str) -> dict[str, int] | None:
        """The claim's reservation item's amounts (strongly consistent), None when it has none."""
        key = self._reservation_key(node_pool, claim_id)
        item = self._get(key["pk"], key["sk"])
        if item is None:
            return None
        return {name: int(value) for name, value in dict(item.get("amount") or {}).items()}

    def reserve_capacity(self, node_pool: str, claim_id: str, amount: Resources, limits: Resources | None, in_use: Resources) -> bool:
        """Add ``amount`` to the pool's reserved totals unless, for some limited resource,
        ``in_use + reserved + amount`` would exceed the limit. Idempotent per claim id.

        One TransactWriteItems of two actions: Put the claim's reservation item
        ``RES#<claim>`` (``attribute_not_exists``) and Update the pool item's totals with, per
        limited resource, the condition ``reserved[r] <= limit[r] - in_use[r] - amount[r]``
        (plus ``attribute_not_exists(claims.<id>)`` for a reservation an older version kept
        in the pool item). DynamoDB applies both or neither, atomically, so overlapping
        callers can never together pass the limit. The cancellation reasons tell the cases
        apart: the reservation item's condition failed: already reserved (True); the pool's
        failed on a missing item: first use, created and tried again; otherwise: the limit
        (False). A cancellation for a concurrent transaction is retried with backoff."""
        if not claim_id:
            raise StateError("reserve_capacity: claim id is empty")
        if amount.any_negative():
            raise StateError(f"reserve_capacity({node_pool}, {claim_id}): amount must not be negative: {amount}")
        headroom: dict[str, int] = {}
        for resource, limit in (limits or {}).items():
            need = amount.get(resource, 0)
            if need <= 0:
                continue
            headroom[resource] = int(limit) - in_use.get(resource, 0) - need
        if any(room < 0 for room in headroom.values()):
            # Cannot fit whatever is reserved; only an earlier reservation by this claim counts.
            return self._held(node_pool, claim_id) is not None or claim_id in self._legacy_claims(node_pool)

        names: dict[str, str] = {"#claims": "claims", "#reserved": "reserved", "#cid": claim_id, "#name": "nodePoolName"}
        values: dict[str, Any] = {":zero": 0, ":name": node_pool}
        sets = ["#name = :name"]
        conditions = ["attribute_exists(pk)", "attribute_not_exists(#claims.#cid)"]
        for index, resource in enumerate(sorted(amount)):
            names[f"#r{index}"] = resource
            values[f":a{index}"] = int(amount[resource])
            sets.append(f"#reserved.#r{index} = if_not_exists(#reserved.#r{index}, :zero) + :a{index}")
            if resource in headroom:
                values[f":max{index}"] = headroom[resource]
                conditions.append(f"(attribute_not_exists(#reserved.#r{index}) OR #reserved.#r{index} <= :max{index})")
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "Item": {**self._reservation_key(node_pool, claim_id), "claimId": claim_id, "amount": _resources_to_item(amount)},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "Key": self._pool_key(node_pool),
                    "UpdateExpression": "SET " + ", ".join(sets),
                    "ConditionExpression": " AND ".join(conditions),
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
        ]
        initialised = False
        for attempt in range(_TRANSACT_ATTEMPTS):
            try:
                self._transact("reserve", actions)
                return True
            except _Cancelled as cancelled:
                if cancelled.failed(0):
                    return True  # this claim's reservation exists: a retry
                if cancelled.failed(1):
                    old = cancelled.items[1]
                    if old is None and not initialised:  # first reservation for this pool
                        self._init_pool(node_pool)
                        initialised = True
                        continue
                    if old is None:
                        raise StateError(f"reserve_capacity({node_pool}, {claim_id}): pool item could not be initialised", code="PoolInitFailed") from None
                    return claim_id in (old.get("claims") or {})
                self._backoff(attempt)
        raise StateError(f"reserve_capacity({node_pool}, {claim_id}): cancelled by concurrent transactions", code="ConcurrentChange")

    def release_capacity(self, node_pool: str, claim_id: str) -> None:
        """Return a claim's reservation; a no-op when it is not (or no longer) reserved.

        One TransactWriteItems: Delete the reservation item, conditional on it still holding
        the amounts just read, and subtract those amounts from the pool's totals. A concurrent
        release (or a shrink in between) fails the condition: read again; gone means done, so
        nothing is ever subtracted twice."""
        for attempt in range(_TRANSACT_ATTEMPTS):
            held = self._held(node_pool, claim_id)
            if held is None:
                if self._release_legacy(node_pool, claim_id):
                    return
                continue
            names, values, sets, conditions = _subtract_checked(held, held, "#amount")
            names["#amount"] = "amount"
            actions: list[dict[str, Any]] = [
                {
                    "Delete": {
                        "Key": self._reservation_key(node_pool, claim_id),
                        "ConditionExpression": " AND ".join(["attribute_exists(pk)", *conditions]),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            ]
            if sets:
                actions.append(
                    {
                        "Update": {
                            "Key": self._pool_key(node_pool),
                            "UpdateExpression": "SET " + ", ".join(sets),
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
            try:
                self._transact("release", actions)
                return
            except _Cancelled as cancelled:
                if not cancelled.failed(0):
                    self._backoff(attempt)
                # Changed under us: read again; gone means a concurrent release already did it.
        raise StateError(f"release_capacity({node_pool}, {claim_id}): the reservation kept changing", code="ConcurrentChange")

    def _release_legacy(self, node_pool: str, claim_id: str) -> bool:
        """Release a reservation an older version kept in the pool item's ``claims`` map: one
        UpdateItem conditional on the amounts read. True when done or nothing is held."""
        held = self._legacy_claims(node_pool).get(claim_id)
        if held is None:
            return True
        amounts = {name: int(value) for name, value in dict(held).items()}
        names, values, sets, conditions = _subtract_checked(amounts, amounts, "#claims.#cid")
        names.update({"#claims": "claims", "#cid": claim_id})
        expression = "REMOVE #claims.#cid"
        if sets:
            expression = "SET " + ", ".join(sets) + " " + expression
        request = _used_only(
            {
                "Key": self._pool_key(node_pool),
                "UpdateExpression": expression,
                "ConditionExpression": " AND ".join(["attribute_exists(#claims.#cid)", *conditions]),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        )
        try:
            self._call("UpdateItem", self._table.update_item, **request)
            return True
        except ClientError as error:
            if not self._is_conditional_failure(error):
                raise
            return False

    def shrink_reservation(self, node_pool: str, claim_id: str, amount: Resources) -> None:
        """Lower a claim's reservation to ``amount`` and the pool's totals by the difference in
        one TransactWriteItems, conditional on the amounts read (like a release), so the pool
        never looks emptier than it is, not even for one round trip. No-op when the claim
        holds no reservation; :class:`StateError` when ``amount`` exceeds what it holds."""
        if amount.any_negative():
            raise StateError(f"shrink_reservation({node_pool}, {claim_id}): amount must not be negative: {amount}")
        for attempt in range(_TRANSACT_ATTEMPTS):
            held = self._held(node_pool, claim_id)
            legacy = held is None
            if legacy:
                raw = self._legacy_claims(node_pool).get(claim_id)
                if raw is None:
                    return
                held = {name: int(value) for name, value in dict(raw).items()}
            assert held is not None
            if any(int(value) > held.get(name, 0) for name, value in amount.items()):
                raise StateError(f"shrink_reservation({node_pool}, {claim_id}): {dict(amount)} exceeds the {held} held")
            differences = {name: held[name] - int(amount.get(name, 0)) for name in held}
            names, values, subtract, conditions = _subtract_checked(
                held,
                {name: difference for name, difference in differences.items() if difference},
                "#claims.#cid" if legacy else "#amount",
            )
            values[":amount"] = _resources_to_item(amount)
            if legacy:
                # The older version's entry in the pool item: one conditional UpdateItem.
                names.update({"#claims": "claims", "#cid": claim_id})
                try:
                    self._call(
                        "UpdateItem",
                        self._table.update_item,
                        **_used_only(
                            {
                                "Key": self._pool_key(node_pool),
                                "UpdateExpression": "SET " + ", ".join(["#claims.#cid = :amount", *subtract]),
                                "ConditionExpression": " AND ".join(["attribute_exists(#claims.#cid)", *conditions]),
                                "ExpressionAttributeNames": names,
                                "ExpressionAttributeValues": values,
                            }
                        ),
                    )
                    return
                except ClientError as error:
                    if not self._is_conditional_failure(error):
                        raise
                    continue
            if not subtract:
                return  # nothing to lower
            names["#amount"] = "amount"
            actions: list[dict[str, Any]] = [
                {
                    "Update": {
                        "Key": self._reservation_key(node_pool, claim_id),
                        "UpdateExpression": "SET #amount = :amount",
                        "ConditionExpression": " AND ".join(["attribute_exists(pk)", *conditions]),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                },
                {
                    "Update": {
                        "Key": self._pool_key(node_pool),
                        "UpdateExpression": "SET " + ", ".join(subtract),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                },
            ]
            try:
                self._transact("shrink", actions)
                return
            except _Cancelled as cancelled:
                if not cancelled.failed(0):
                    self._backoff(attempt)
                # Changed under us (released, or shrunk by a concurrent retry): read again.
        raise StateError(f"shrink_reservation({node_pool}, {claim_id}): the reservation kept changing", code="ConcurrentChange")

    def reserved_capacity(self, node_pool: str) -> Resources:
        key = self._pool_key(node_pool)
        item = self._get(key["pk"], key["sk"]) or {}
        return _resources_from_item(item.get("reserved"))

    def reservations(self, node_pool: str) -> dict[str, Resources]:
        """Claim id -> reservation: one paged, strongly consistent Query of the pool's
        partition (its reservation items, and the pool item for what an older version kept
        in its ``claims`` map)."""
        items = self._query(KeyConditionExpression=Key("pk").eq(self._pool_key(node_pool)["pk"]), ConsistentRead=True)
        held: dict[str, Resources] = {}
        for item in items:
            sk = str(item.get("sk", ""))
            if sk == POOL:
                for claim_id, amount in dict(item.get("claims") or {}).items():
                    held.setdefault(str(claim_id), _resources_from_item(amount))
            elif sk.startswith(_RESERVATION):
                held[sk[len(_RESERVATION) :]] = _resources_from_item(item.get("amount"))
        return dict(sorted(held.items()))

    # ------------------------------------------------------------ leases

    @staticmethod
    def _lease_key(name: str) -> dict[str, str]:
        if not name:
            raise StateError("lease name is empty")
        return {"pk": f"{LEASE}#{name}", "sk": LEASE}

    def acquire_lease(self, name: str, owner: str, now: datetime, ttl_seconds: int) -> bool:
        """Take or renew ``name`` until ``now + ttl``; False while another owner holds it.

        One conditional PutItem: absent, expired (``expiresAt <= now``, whole seconds rounded so a
        lease never ends early) or already ours. The item's TTL cleans up abandoned leases.
        """
        if not owner:
            raise StateError("acquire_lease: owner is empty")
        if ttl_seconds <= 0:
            raise StateError(f"acquire_lease({name}): ttl_seconds must be positive")
        now = _aware(now, "acquire_lease now")
        item = {
            **self._lease_key(name),
            "owner": owner,
            "acquiredAt": now.astimezone(UTC).isoformat(),
            "expiresAt": _epoch_ceil(now + timedelta(seconds=ttl_seconds)),
        }
        condition = Attr("pk").not_exists() | Attr("expiresAt").lte(_epoch_floor(now)) | Attr("owner").eq(owner)
        try:
            self._call("PutItem", self._table.put_item, Item=item, ConditionExpression=condition)
        except ClientError as error:
            if self._is_conditional_failure(error):
                return False
            raise
        return True

    def release_lease(self, name: str, owner: str) -> None:
        """Give up the lease if ``owner`` holds it (otherwise nothing happens)."""
        try:
            self._call("DeleteItem", self._table.delete_item, Key=self._lease_key(name), ConditionExpression=Attr("owner").eq(owner))
        except ClientError as error:
            if not self._is_conditional_failure(error):
                raise

    # ------------------------------------------------------------ unavailable offerings

    def mark_unavailable(self, key: OfferingKey, until: datetime, reason: str) -> None:
        """Record an offering as out of capacity until ``until``; an existing later expiry is kept.
        A key with a ``reservation_id`` is that reservation's one record (its type and zone
        are kept for display)."""
        until = _aware(until, "mark_unavailable until")
        expires = _epoch_ceil(until)
        pk = f"{UNAVAILABLE}#reservation#{key.reservation_id}" if key.reservation_id else f"{UNAVAILABLE}#{key.instance_type}#{key.zone}#{key.capacity_type}"
        item = {
            "pk": pk,
            "sk": UNAVAILABLE,
            "nodePool": f"#{UNAVAILABLE}",  # overloads GSI byNodePool: list all with one Query
            "instanceType": key.instance_type,
            "zone": key.zone,
            "capacityType": key.capacity_type,
            **({"reservationId": key.reservation_id} if key.reservation_id else {}),
            "reason": reason,
            "expiresAt": expires,
        }
        try:
            self._call(
                "PutItem",
                self._table.put_item,
                Item=item,
                ConditionExpression=Attr("pk").not_exists() | Attr("expiresAt").lt(expires),
            )
        except ClientError as error:
            if not self._is_conditional_failure(error):
                raise

    def unavailable_offerings(self, now: datetime) -> frozenset[OfferingKey]:
        """Offerings marked unavailable and not yet expired at ``now`` (expired items that TTL
        has not deleted yet are filtered out)."""
        items = self._query(IndexName=BY_NODE_POOL, KeyConditionExpression=Key("nodePool").eq(f"#{UNAVAILABLE}"))
        return frozenset(
            OfferingKey(str(item["instanceType"]), str(item["zone"]), str(item["capacityType"]), str(item.get("reservationId") or ""))
            for item in items
            if not self._expired(item, now)
        )

    # ------------------------------------------------------------ generic items

    @staticmethod
    def _generic_kind(kind: str) -> str:
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise StateError(f"item kind {kind!r} must be a letter followed by letters, digits, '_' or '-'")
        upper = kind.upper()
        if upper in RESERVED_KINDS:
            raise StateError(f"item kind {kind!r} is reserved for the adapter's own records")
        return upper

    def _generic_key(self, kind: str, item_id: str) -> dict[str, str]:
        upper = self._generic_kind(kind)
        if not item_id:
            raise StateError(f"{kind} item id is empty")
        return {"pk": f"{upper}#{item_id}", "sk": upper}

    def put_item(self, kind: str, item_id: str, data: JsonDict, *, expires_at: datetime | None = None, if_absent: bool = False) -> bool:
        """Store ``data`` (any JSON) under (kind, id); with ``if_absent``, False when a live
        (unexpired) item exists. Kinds are case-insensitive."""
        key = self._generic_key(kind, item_id)
        try:
            body = json.dumps(data, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise StateError(f"{kind} item {item_id}: data is not JSON-serialisable: {error}") from None
        now = self._clock.now()
        item: dict[str, Any] = {
            **key,
            "nodePool": f"#{key['sk']}",  # overloads GSI byNodePool: list a kind with one Query
            "itemId": item_id,
            "data": body,
            "updatedAt": now.astimezone(UTC).isoformat(),
        }
        if expires_at is not None:
            item["expiresAt"] = _epoch_ceil(_aware(expires_at, f"{kind} item {item_id} expires_at"))
        kwargs: dict[str, Any] = {"Item": item}
        if if_absent:
            kwargs["ConditionExpression"] = Attr("pk").not_exists() | Attr("expiresAt").lte(_epoch_floor(now))
        try:
            self._call("PutItem", self._table.put_item, **kwargs)
        except ClientError as error:
            if if_absent and self._is_conditional_failure(error):
                return False
            raise
        return True

    def get_item(self, kind: str, item_id: str) -> JsonDict | None:
        key = self._generic_key(kind, item_id)
        item = self._get(key["pk"], key["sk"])
        if not item or self._expired(item):
            return None
        data: JsonDict = json.loads(item["data"])
        return data

    def delete_item(self, kind: str, item_id: str) -> None:
        self._call("DeleteItem", self._table.delete_item, Key=self._generic_key(kind, item_id))

    def list_items(self, kind: str) -> list[JsonDict]:
        """Live items of a kind, ordered by item id (GSI ``byNodePool`` overloaded with
        ``#<KIND>``; eventually consistent). Returns the data only: keep the id inside it."""
        upper = self._generic_kind(kind)
        items = self._query(IndexName=BY_NODE_POOL, KeyConditionExpression=Key("nodePool").eq(f"#{upper}"))
        now = self._clock.now()
        live = sorted((str(item.get("itemId", "")), item["data"]) for item in items if not self._expired(item, now))
        return [json.loads(data) for _, data in live]
