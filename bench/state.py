"""DynamoDB state at scale: ``python -m bench.state [--claims N]``.

Writes N open claims (launched, 30 pods each, the size a 5,000-node cluster's claims have) and
their limit reservations in ONE NodePool through the real adapter
(:class:`joiner.adapters.state.StateAdapter`) into moto, then measures every stored item with
DynamoDB's item-size rules and prices the minute path's reads in capacity units from those
sizes (moto reports a constant ``ConsumedCapacity``, so it is not used):

* ``largest_item_bytes`` / ``largest_item_kind``: the biggest item (DynamoDB refuses > 400 KB);
  ``pool_item_bytes``, ``reservation_item_bytes``: the pool total and one claim's reservation;
  ``legacy_pool_item_bytes``: the pool item as the previous layout kept it (a map of every
  live claim), for comparison;
* ``open_claims_rcu``: one ``open_claims()`` (Query of the sparse GSI ``byOpenClaim``,
  eventually consistent: half a unit per 4 KB) against ``open_claims_scan_rcu``, the consistent
  Scan of the whole table it replaces; ``..._per_minute``: four readers a minute (scanner,
  disruption, NodeClaim sync, gc);
* ``reservations_rcu``: one ``reservations(pool)`` (consistent Query of the pool's partition);
* ``reserve_wcu``: one reservation (TransactWriteItems of the reservation item and the pool
  total: two units per KB each) against ``legacy_reserve_wcu`` (one UpdateItem of the map item);
* ``open_claims_s`` / ``reservations_s``: wall time of those reads against in-process moto.

Prints one JSON line: ``{"bench": "state", "claims": ..., ...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from joiner.adapters.state import StateAdapter
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord

MAX_ITEM_BYTES = 400 * 1024
T0 = datetime(2025, 6, 1, tzinfo=UTC)
POOL = "default"
PODS_PER_CLAIM = 30
READERS_PER_MINUTE = 4


def value_size(value: Any) -> int:
    """Bytes DynamoDB counts for one attribute value (its documented item-size rules)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, int | float | Decimal):
        digits = Decimal(str(value)).normalize().as_tuple().digits
        return min(21, math.ceil(len(digits) / 2) + 1)
    if isinstance(value, Mapping):
        return 3 + sum(len(str(name).encode("utf-8")) + value_size(item) + 1 for name, item in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(value_size(item) + 1 for item in value)
    raise TypeError(f"no DynamoDB size for {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """Bytes of a whole item: attribute names plus values."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def read_units(total_bytes: int, *, consistent: bool) -> float:
    units = math.ceil(total_bytes / 4096)
    return float(units) if consistent else units / 2


def write_units(item_bytes: int) -> int:
    return max(1, math.ceil(item_bytes / 1024))


class _Clock:
    def now(self) -> datetime:
        return T0


def _claim(index: int) -> tuple[ClaimRecord, Resources]:
    claim_id = f"{POOL}-{index:016x}"
    amount = Resources({"cpu": 4000, "memory": 16 * 2**30 * 1000, "nodes": 1000, "pods": 58000})
    pods = tuple(f"team-{index % 40:02d}/web-{index:05x}-7d9c6b5f4-{pod:05d}" for pod in range(PODS_PER_CLAIM))
    record = ClaimRecord(
        claim_id=claim_id,
        node_pool=POOL,
        state="registered",
        created_at=T0 - timedelta(minutes=index % 600),
        instance_id=f"i-{index:017x}",
        instance_type="m6i.xlarge",
        zone="us-east-1a",
        capacity_type="spot",
        price=0.0731,
        pods=pods,
        node_name=f"ip-10-{index // 250 % 256}-{index % 250}-17.ec2.internal",
        reserved=amount,
        launched_at=T0 - timedelta(minutes=index % 600),
        registered_at=T0 - timedelta(minutes=index % 600) + timedelta(seconds=40),
        pool_hash="0123456789abcdef",
        class_hash="fedcba9876543210",
    )
    return record, amount


def measure(claims: int) -> dict[str, Any]:
    from moto import mock_aws

    from joiner.adapters.aws import AwsClients
    from testworld.aws import REGION, create_state_table, fake_credentials, item_level_transaction_rollback

    with fake_credentials(), mock_aws(), item_level_transaction_rollback():
        clients = AwsClients(REGION)
        table = clients.table(create_state_table(clients.dynamodb, "bench-state"))
        state = StateAdapter(table, _Clock(), open_index_settle=timedelta(0))
        limits = Resources({"cpu": 10**9, "nodes": 10**7})
        legacy_claims: dict[str, dict[str, int]] = {}
        for index in range(claims):
            record, amount = _claim(index)
            if not state.reserve_capacity(POOL, record.claim_id, amount, limits, Resources()):
                raise SystemExit(f"reservation {index} refused")
            state.put_claim(record)
            legacy_claims[record.claim_id] = {name: int(value) for name, value in sorted(amount.items())}
        state.open_claims()  # the migration marker; then the index is used
        items: list[dict[str, Any]] = []
        scan: dict[str, Any] = {}
        while True:
            page = table.scan(**scan)
            items.extend(page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                break
            scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        sizes = [(item_size(item), _kind(item)) for item in items]
        largest, largest_kind = max(sizes)
        pool_item = next(item for item in items if item["sk"] == "POOL")
        reservation = next(item for item in items if str(item["sk"]).startswith("RES#"))
        legacy_pool = {**pool_item, "claims": legacy_claims}
        open_bytes = sum(size for size, kind in sizes if kind == "claim")
        partition_bytes = sum(size for size, kind in sizes if kind in ("pool", "reservation"))
        table_bytes_before = sum(size for size, kind in sizes if kind not in ("pool", "reservation")) + item_size(legacy_pool)

        # A reader that wrote none of them (gc, disruption): the index alone.
        state = StateAdapter(table, _Clock(), open_index_settle=timedelta(0))
        started = time.perf_counter()
        found = state.open_claims()
        open_seconds = time.perf_counter() - started
        started = time.perf_counter()
        held = state.reservations(POOL)
        reservations_seconds = time.perf_counter() - started
        if len(found) != claims or len(held) != claims:
            raise SystemExit(f"read {len(found)} open claims and {len(held)} reservations, wrote {claims}")
        open_rcu = read_units(open_bytes, consistent=False)
        scan_rcu = read_units(table_bytes_before, consistent=True)
        return {
            "bench": "state",
            "claims": claims,
            "largest_item_bytes": largest,
            "largest_item_kind": largest_kind,
            "item_limit_bytes": MAX_ITEM_BYTES,
            "pool_item_bytes": item_size(pool_item),
            "reservation_item_bytes": item_size(reservation),
            "claim_item_bytes_mean": round(open_bytes / claims),
            "legacy_pool_item_bytes": item_size(legacy_pool),
            "open_claims_read_mb": round(open_bytes / 1e6, 2),
            "open_claims_rcu": open_rcu,
            "open_claims_rcu_per_minute": open_rcu * READERS_PER_MINUTE,
            "open_claims_scan_rcu": scan_rcu,
            "open_claims_scan_rcu_per_minute": scan_rcu * READERS_PER_MINUTE,
            "reservations_rcu": read_units(partition_bytes, consistent=True),
            "reserve_wcu": 2 * (write_units(item_size(reservation)) + write_units(item_size(pool_item))),
            "legacy_reserve_wcu": write_units(item_size(legacy_pool)),
            "open_claims_s": round(open_seconds, 3),
            "reservations_s": round(reservations_seconds, 3),
        }


def _kind(item: Mapping[str, Any]) -> str:
    sk = str(item.get("sk", ""))
    if sk == "CLAIM":
        return "claim"
    if sk == "POOL":
        return "pool"
    if sk.startswith("RES#"):
        return "reservation"
    return sk.lower()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=5000)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.claims)), flush=True)


if __name__ == "__main__":
    main()
