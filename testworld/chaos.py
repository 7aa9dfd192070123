"""Faults for the soak (:mod:`testworld.soak`), injected where the real world injects them:
around each external call a Lambda execution environment makes.

A :class:`Gate` sits on one execution environment's clients: botocore ``before-call`` /
``after-call`` hooks on every AWS client of its boto3 session, and a wrapper around the
Kubernetes adapter's HTTP transport. Before each invocation the soak :meth:`~Gate.arm`\\ s it with
an :class:`Armed` plan; the gate counts the invocation's calls and, at the chosen one,

* raises :class:`LambdaDeath` *after* the call took effect (the answer is lost, as when the
  environment times out or runs out of memory): from then on every call of the invocation
  dies too, so nothing the handler would still do reaches AWS or Kubernetes;
* answers an EC2 call with ``RequestLimitExceeded`` (throttling beyond botocore's retries:
  the hook answers before botocore's retry loop);
* answers chosen ``CreateFleet`` overrides with ``InsufficientInstanceCapacity``
  (:class:`testworld.faults.CapacityInjector`);
* pauses the invocation (another one runs meanwhile) until :meth:`~Gate.release`.

:class:`LambdaDeath` is a ``BaseException``: handler code that isolates ordinary errors must
not survive its own death. Development-only.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testworld.faults import CapacityInjector, aws_response

__all__ = ["CRASH_KINDS", "Armed", "Gate", "LambdaDeath", "SimulatedCrash", "call_tags"]

#: crash kind -> the calls it counts (the crash strikes after the n-th of them).
CRASH_KINDS: dict[str, str] = {
    "crash": "call",
    "crash-after-launch": "CreateFleet",
    "crash-after-claim-write": "claim-write",
    "crash-mid-drain": "drain",
}
THROTTLE_CODE = "RequestLimitExceeded"


class LambdaDeath(BaseException):
    """The execution environment died during this invocation."""


class SimulatedCrash(Exception):
    """What the simulator reports for an invocation that died (Lambda reports a timeout or a
    runtime exit; SQS keeps its messages until their visibility timeout)."""


@dataclass(frozen=True)
class Armed:
    """What strikes during one invocation. ``crash``: a :data:`CRASH_KINDS` key and the
    1-based count of matching calls after which the environment dies; ``pause_after``: pause
    after that many calls; ``throttle_ec2``: 1-based indexes of EC2 calls answered
    ``RequestLimitExceeded``; ``capacity``: (instance type, zone, capacity type) -> fails."""

    crash: tuple[str, int] | None = None
    pause_after: int | None = None
    throttle_ec2: frozenset[int] = frozenset()
    capacity: Callable[[str, str, str], bool] | None = None


def call_tags(operation: str, body: Any = None) -> frozenset[str]:
    """What a call counts as for :data:`CRASH_KINDS`: every call is a ``call``;
    ``CreateFleet``; a DynamoDB write of a claim item is a ``claim-write``; a pod eviction
    or deletion is a ``drain`` step."""
    tags = {"call"}
    if operation == "ec2.CreateFleet":
        tags.add("CreateFleet")
    if operation in ("dynamodb.PutItem", "dynamodb.UpdateItem", "dynamodb.DeleteItem", "dynamodb.TransactWriteItems"):
        text = body.decode() if isinstance(body, bytes) else str(body or "")
        if '"CLAIM#' in text:
            tags.add("claim-write")
    if (operation.startswith("k8s.POST ") and operation.endswith("/eviction")) or (operation.startswith("k8s.DELETE ") and "/pods/" in operation):
        tags.add("drain")
    return frozenset(tags)


@dataclass
class Gate:
    """The faults of one execution environment (see the module docstring). Thread-safe: a
    handler may make calls from several threads."""

    function: str
    on_capacity_failure: Callable[[Any], None] | None = None
    armed: Armed = field(default_factory=Armed)
    counts: Counter[str] = field(default_factory=Counter)
    dead: bool = False
    died_after: str = ""
    throttled: int = 0
    paused: threading.Event = field(default_factory=threading.Event)
    _resume: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ec2_calls: int = 0

    def __post_init__(self) -> None:
        self.capacity = CapacityInjector(failing=self._capacity_fails, on_failure=self.on_capacity_failure)

    # -- the soak's side

    def arm(self, armed: Armed) -> None:
        """Start an invocation with ``armed``."""
        with self._lock:
            self.armed = armed
            self.counts = Counter()
            self.dead, self.died_after, self.throttled, self._ec2_calls = False, "", 0, 0
            self.paused.clear()
            self._resume.clear()

    def disarm(self) -> None:
        """The invocation is over (released if it was paused)."""
        self._resume.set()
        with self._lock:
            self.armed = Armed()

    def release(self) -> None:
        """Let a paused invocation go on."""
        self._resume.set()

    # -- the call side

    def _capacity_fails(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        failing = self.armed.capacity
        return failing is not None and failing(instance_type, zone, capacity_type)

    def before(self, operation: str) -> bool:
        """Before a call: dies if the invocation is dead, waits while it is paused; True when
        the call must be answered ``RequestLimitExceeded``."""
        if self.paused.is_set():
            self._resume.wait(timeout=120)
        with self._lock:
            if self.dead:
                raise LambdaDeath(f"{self.function}: the execution environment is gone (died after {self.died_after})")
            if operation.startswith("ec2."):
                self._ec2_calls += 1
                if self._ec2_calls in self.armed.throttle_ec2:
                    self.throttled += 1
                    return True
        return False

    def after(self, operation: str, tags: frozenset[str]) -> None:
        """After a call took effect: counts it, dies or pauses here if armed so."""
        pause = False
        with self._lock:
            for tag in tags:
                self.counts[tag] += 1
            crash = self.armed.crash
            if crash is not None and not self.dead:
                kind, after = crash
                if self.counts[CRASH_KINDS[kind]] == after and CRASH_KINDS[kind] in tags:
                    self.dead = True
                    self.died_after = f"{operation} (call {self.counts['call']})"
            if self.dead:
                raise LambdaDeath(f"{self.function}: died after {self.died_after}")
            if self.armed.pause_after is not None and self.counts["call"] == self.armed.pause_after and not self.paused.is_set():
                pause = True
                self.paused.set()
        if pause:
            self._resume.wait(timeout=120)

    # -- installing

    def install_aws(self, session: Any) -> None:
        """Hooks on every client ``session`` (a boto3 session) creates from now on."""
        events = session.events
        events.register_first("before-call.ec2.CreateFleet", self.capacity.before_call, unique_id=f"soak-capacity-{id(self)}")
        events.register("after-call.ec2.CreateFleet", self.capacity.after_call, unique_id=f"soak-capacity-after-{id(self)}")
        events.register_first("before-call", self._before_aws, unique_id=f"soak-before-{id(self)}")
        events.register_last("after-call", self._after_aws, unique_id=f"soak-after-{id(self)}")

    def _before_aws(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> Any:
        operation = f"{model.service_model.endpoint_prefix}.{model.name}"
        context["soak_tags"] = call_tags(operation, params.get("body"))
        if self.before(operation):
            context["soak_throttled"] = True
            error = {"Code": THROTTLE_CODE, "Message": "Request limit exceeded."}
            return aws_response(503, ""), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 503}}
        return None

    def _after_aws(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        if context.get("soak_throttled"):
            return
        operation = f"{model.service_model.endpoint_prefix}.{model.name}"
        self.after(operation, context.get("soak_tags") or call_tags(operation))

    def install_kubernetes(self, transport: Any) -> None:
        """Wrap the Kubernetes adapter's HTTP transport (its urllib3 pool's ``request``: every
        Kubernetes request the adapter makes)."""
        original = transport.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
            operation = f"k8s.{method} /{path}"
            self.before(operation)
            answer = original(method, url, *args, **kwargs)
            self.after(operation, call_tags(operation))
            return answer

        transport.request = request


def describe_counts(counts: Counter[str]) -> str:
    """``{a: 1, b: 2}`` sorted by name."""
    return json.dumps(dict(sorted(counts.items())))
