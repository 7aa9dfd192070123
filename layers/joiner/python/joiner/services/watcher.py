"""The watcher: responsive mode's cheap waiting half.

A small function holds a watch on pods without a node (and on NodePools, NodeClasses and the
Nodes Joiner launched until it registers them) for most of each minute and wakes the scanner
(one economy round) only when pods become pending, or when a NodePool or NodeClass changes or
such a Node registers while pods are pending (:mod:`joiner.services.nomination`), batched by
:class:`joiner.domain.wake.BatchWindow` (1 s idle / 10 s maximum from the first pending pod).
The scanner runs with the memory its CPU needs, only when there is work; the watcher waits
at 128 MB.

Nothing is lost between invocations: the watch position (the last ``resourceVersion`` seen)
and the pods already reported are saved in the state table; the next watcher resumes the
watch from there, so a pod that became pending while no watcher ran arrives as a replayed
event. A position the API server no longer keeps (410 Gone) falls back to a full list, whose
pending pods all count as new. A batch still open when the window ends is woken before the
position is saved, so no saved position ever skips a pod nobody planned.

A wake-up counts only once Lambda accepted it: when ``lambda:Invoke`` fails (throttled,
for example) the batch stays open and is tried again :data:`WAKE_RETRY_SECONDS` later; one
still refused when the window ends is saved with the position (``unwoken``) and the next
watcher wakes the scanner for it at once (``PlannerWakeFailures`` counts the refusals).

Waking twice is harmless: the scanner's round lease admits one round at a time, claim ids
derive from the pods and launches carry client tokens (``tests/e2e/test_watcher.py``).
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from joiner.adapters.kubernetes import is_pending_pod
from joiner.domain.wake import BatchWindow, PendingBatch
from joiner.observability import logger
from joiner.ports import JsonDict, KubernetesError, PodWatchPort, ScannerWakePort, WatchEvent, WatchExpired
from joiner.services.context import Runtime

__all__ = [
    "NODES",
    "PLAN_INPUTS",
    "PODS",
    "WAKE_RETRY_SECONDS",
    "read_position",
    "read_unwoken",
    "WATCH_POSITION_ID",
    "WATCH_POSITION_KIND",
    "PendingPods",
    "WatchSummary",
    "run_watcher",
]

WATCH_POSITION_KIND = "watch"
WATCH_POSITION_ID = "pods"
#: Pods remembered as already reported, across invocations (a bound: the oldest are forgotten).
REMEMBERED_PODS = 2_000
#: Stream failures (not 410) tolerated in one invocation before it gives up; the next resumes.
MAX_STREAM_ERRORS = 5
#: The window's end is kept this far from the function timeout (wake, save, return).
EXIT_RESERVE_SECONDS = 3.0
#: How often the position is saved while streaming (a crash replays at most this much).
SAVE_EVERY_SECONDS = 15.0
#: A wake-up the scanner did not accept is tried again this much later (each try already
#: includes botocore's retries).
WAKE_RETRY_SECONDS = 2.0


@dataclass
class PendingPods:
    """Which unbound pods are pending and which became so since the last wake-up."""

    window: BatchWindow
    known: dict[str, None] = field(default_factory=dict)  # insertion-ordered set of reported or batched uids
    batch: PendingBatch = field(default_factory=PendingBatch)

    def observe(self, event_type: str, pod: JsonDict, now: datetime) -> None:
        """One watch event (or a listed pod as ``ADDED``)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        if event_type != "DELETED" and is_pending_pod(pod):
            if uid not in self.known:
                self.known[uid] = None
                self.batch = self.batch.add(uid, now)
        else:
            self.known.pop(uid, None)

    def replan(self, now: datetime) -> None:
        """A NodePool or NodeClass changed, or a Node Joiner launched registered: every pending
        pod goes into the batch again."""
        for uid in self.known:
            self.batch = self.batch.add(uid, now)

    def due(self, now: datetime) -> bool:
        return self.batch.is_due(now, self.window)

    def seconds_until_due(self, now: datetime) -> float | None:
        due = self.batch.due_at(self.window)
        return None if due is None else max(0.0, (due - now).total_seconds())

    def take(self) -> int:
        """Close the batch (the scanner accepted the wake-up); returns how many pods it held."""
        size = len(self.batch.pods)
        self.batch = PendingBatch()
        return size

    def carry(self, uids: list[str], now: datetime) -> None:
        """Pods an earlier watcher could not wake the scanner for: batched again at once."""
        for uid in uids:
            self.known[uid] = None
            self.batch = self.batch.add(uid, now)

    def remembered(self) -> list[str]:
        return list(self.known)[-REMEMBERED_PODS:]


@dataclass(frozen=True, slots=True)
class WatchSummary:
    """One watcher invocation: wake-ups, pods they carried, events read, relists, stream errors."""

    wake_ups: int
    woken_pods: int
    events: int
    relists: int
    stream_errors: int
    resource_version: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "wakeUps": self.wake_ups,
            "wokenPods": self.woken_pods,
            "events": self.events,
            "relists": self.relists,
            "streamErrors": self.stream_errors,
            "resourceVersion": self.resource_version,
        }


_VERSION = re.compile(r"[0-9A-Za-z._-]{1,128}")


def read_unwoken(saved: JsonDict | None) -> list[str]:
    """The pods an earlier watcher could not wake the scanner for (malformed entries dropped)."""
    unwoken = saved.get("unwoken") if isinstance(saved, dict) else None
    uids = [uid for uid in unwoken if isinstance(uid, str) and 0 < len(uid) <= 128] if isinstance(unwoken, list) else []
    return uids[-REMEMBERED_PODS:]


def read_position(saved: JsonDict | None) -> tuple[dict[str, str], list[str]]:
    """The saved stream versions and reported pods; anything malformed is dropped with a
    warning (its stream is listed again, which loses nothing)."""
    saved = saved if isinstance(saved, dict) else {}
    raw = {
        PODS: saved.get("resourceVersion"),
        **{stream: (saved.get("planInputs") or {}).get(stream) for stream in PLAN_INPUTS if isinstance(saved.get("planInputs"), dict)},
    }
    versions = dict.fromkeys((PODS, *PLAN_INPUTS), "")
    for stream, value in raw.items():
        if isinstance(value, str) and _VERSION.fullmatch(value):
            versions[stream] = value
        elif value not in (None, ""):
            logger.warning("ignoring a saved watch position: not a resourceVersion", extra={"stream": stream, "position": repr(value)[:64]})
    pending = saved.get("pending")
    uids = [uid for uid in pending if isinstance(uid, str) and 0 < len(uid) <= 128] if isinstance(pending, list) else []
    return versions, uids[-REMEMBERED_PODS:]


class _Ended:
    """The server ended the stream (its timeout)."""


#: The watched streams: unbound pods, and the plan inputs whose changes can make pending pods fit
#: (NodePools, NodeClasses) or want a round at once (``nodes``: a Node Joiner launched has
#: registered; the round nominates the pods it was launched for while it is still not ready).
PODS = "pods"
NODES = "nodes"
PLAN_INPUTS = ("nodepools", "nodeclasses", NODES)
_Item = WatchEvent | _Ended | Exception


def _read(pods: PodWatchPort, stream: str, version: str, timeout_seconds: int, out: queue.Queue[tuple[str, _Item]]) -> None:
    try:
        events = pods.watch_unbound_pods(version, timeout_seconds) if stream == PODS else pods.watch_plan_inputs(stream, version, timeout_seconds)
        for event in events:
            out.put((stream, event))
        out.put((stream, _Ended()))
    except Exception as error:  # noqa: BLE001 - handed to the invocation's thread, which decides
        out.put((stream, error))


def run_watcher(
    runtime: Runtime,
    pods: PodWatchPort,
    scanner: ScannerWakePort,
    *,
    remaining_ms: Callable[[], int] | None = None,
) -> WatchSummary:
    """Watch for about ``scan_window_seconds`` (less when the function's time runs short) and
    wake ``scanner`` per batch of newly pending pods; a NodePool or NodeClass change while pods
    are pending puts them all in the batch again (the plan may now place them)."""
    settings = runtime.settings
    clock = runtime.clock
    tracker = PendingPods(BatchWindow(settings.batch_idle_seconds, settings.batch_max_seconds))
    end = clock.now() + timedelta(seconds=settings.scan_window_seconds)
    wake_ups = woken = events = relists = errors = 0

    def time_left() -> float:
        left = (end - clock.now()).total_seconds()
        if remaining_ms is not None:
            left = min(left, remaining_ms() / 1000.0 - EXIT_RESERVE_SECONDS)
        return left

    retry_at: datetime | None = None

    def wake(reason: str) -> bool:
        """Wake the scanner for the batch; the batch closes only if Lambda accepted it."""
        nonlocal wake_ups, woken, retry_at
        size = len(tracker.batch.pods)
        try:
            scanner.wake(reason, size)
        except Exception as error:  # noqa: BLE001 - any failure: not accepted; the batch stays and is tried again
            retry_at = clock.now() + timedelta(seconds=WAKE_RETRY_SECONDS)
            runtime.count("PlannerWakeFailures", 1)
            logger.warning(
                "the scanner did not accept the wake-up; the batch stays open",
                extra={"reason": reason, "pendingPods": size, "error": f"{type(error).__name__}: {error}"},
            )
            return False
        retry_at = None
        tracker.take()
        wake_ups += 1
        woken += size
        runtime.count("PlannerWakeUps", 1)
        logger.info("woke the scanner", extra={"reason": reason, "pendingPods": size})
        return True

    def relist() -> str:
        listed, listed_version = pods.list_unbound_pods()
        now = clock.now()
        tracker.known.clear()  # a pod pending now and before the gap is reported again: harmless
        for pod in listed:
            tracker.observe("ADDED", pod, now)
        return listed_version

    saved_position = runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID)
    versions, remembered = read_position(saved_position)
    for uid in remembered:
        tracker.known[uid] = None
    tracker.carry(read_unwoken(saved_position), clock.now())
    if not versions[PODS]:
        relists += 1
        versions[PODS] = relist()
    #: streams RBAC refuses: a cluster whose manifests/rbac.yaml predates the Nodes stream (403)
    #: keeps waking the scanner for pods; its joining Nodes wait for the scanner's tick
    refused: set[str] = set()

    def refuse(stream: str, error: KubernetesError) -> None:
        refused.add(stream)
        runtime.count("WatchForbidden", 1)
        logger.warning("watch refused by RBAC: apply manifests/rbac.yaml; watching without it", extra={"stream": stream, "error": str(error)})

    def plan_input_version(stream: str) -> str:
        try:
            return pods.plan_input_version(stream)
        except KubernetesError as error:
            if stream != NODES or error.status != 403:
                raise
            refuse(stream, error)
            return ""

    for stream in PLAN_INPUTS:
        if not versions[stream]:
            versions[stream] = plan_input_version(stream)

    def save() -> None:
        position: JsonDict = {
            "resourceVersion": versions[PODS],
            "planInputs": {stream: versions[stream] for stream in PLAN_INPUTS},
            "pending": tracker.remembered(),
            "savedAt": clock.now().isoformat(),
        }
        if tracker.batch.pods:  # a wake-up not accepted: the next watcher makes it
            position["unwoken"] = sorted(tracker.batch.pods)[-REMEMBERED_PODS:]
        runtime.state.put_item(WATCH_POSITION_KIND, WATCH_POSITION_ID, position)

    inbox: queue.Queue[tuple[str, _Item]] = queue.Queue()
    open_streams: set[str] = set()
    opened_at: dict[str, datetime] = {}
    last_save = clock.now()
    try:
        while True:
            now = clock.now()
            if tracker.due(now) and (retry_at is None or now >= retry_at):
                wake("batch")
            left = time_left()
            if left >= 1.0:
                for stream in sorted({PODS, *PLAN_INPUTS} - open_streams - refused):
                    open_streams.add(stream)
                    opened_at[stream] = now
                    threading.Thread(
                        target=_read, args=(pods, stream, versions[stream], max(1, int(left)), inbox), daemon=True, name=f"joiner-watch-{stream}"
                    ).start()
            until_due = tracker.seconds_until_due(now)
            if until_due is not None and retry_at is not None:
                until_due = max(until_due, (retry_at - now).total_seconds())
            try:
                if left <= 0:  # time is up: only what already arrived (its position is saved below)
                    stream, item = inbox.get_nowait()
                else:
                    stream, item = inbox.get(timeout=max(0.01, min(left, until_due if until_due is not None else left)))
            except queue.Empty:
                if left <= 0:
                    break
                continue
            if isinstance(item, WatchEvent):
                events += 1
                versions[stream] = item.resource_version or versions[stream]
                if item.type == "BOOKMARK":
                    continue
                if stream == PODS:
                    tracker.observe(item.type, item.object, clock.now())
                elif stream != NODES or item.type == "ADDED":
                    tracker.replan(clock.now())
                if (clock.now() - last_save).total_seconds() >= SAVE_EVERY_SECONDS and not tracker.batch.pods:
                    save()
                    last_save = clock.now()
                continue
            open_streams.discard(stream)
            if isinstance(item, _Ended):
                if (clock.now() - opened_at[stream]).total_seconds() < 1.0:
                    runtime.sleep(min(1.0, max(0.0, time_left())))  # a server ending streams at once: no busy loop
            elif isinstance(item, WatchExpired):
                logger.warning("watch position expired: listing again", extra={"stream": stream, "position": versions[stream]})
                relists += 1
                if stream == PODS:
                    versions[PODS] = relist()
                else:
                    versions[stream] = plan_input_version(stream)
                    tracker.replan(clock.now())  # a change may have been compacted away
            elif isinstance(item, KubernetesError) and item.status == 403 and stream == NODES:
                refuse(stream, item)
            elif isinstance(item, Exception):
                errors += 1
                runtime.count("WatchErrors", 1)
                logger.warning("watch failed", extra={"stream": stream, "failures": errors, "error": str(item)})
                if errors >= MAX_STREAM_ERRORS or not isinstance(item, KubernetesError):
                    raise item
                runtime.sleep(min(1.0 * errors, max(0.0, time_left())))
    finally:
        if tracker.batch.pods:
            wake("window end")  # before saving a position past these pods
        save()
    return WatchSummary(wake_ups, woken, events, relists, errors, versions[PODS])
