"""Waking the scanner: an asynchronous ``lambda:InvokeFunction`` of the scanner function
(:class:`joiner.ports.ScannerWakePort`)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["SCANNER_PAYLOAD", "LambdaScannerWaker", "ScannerWakeError"]

#: One economy round: the watcher already did the waiting.
SCANNER_PAYLOAD = {"mode": "economy"}


class ScannerWakeError(RuntimeError):
    """The scanner could not be invoked (after botocore's retries)."""


class LambdaScannerWaker:
    """Invokes ``function_name`` with ``InvocationType=Event``: Lambda queues the round and
    retries it when the function is busy (reserved concurrency 1), so a wake-up during a
    round runs after it instead of being lost."""

    def __init__(self, client: Any, function_name: str) -> None:
        if not function_name:
            raise ValueError("LambdaScannerWaker: the scanner function name is required (JOINER_PLANNER_FUNCTION)")
        self._client = client
        self._function = function_name

    def wake(self, reason: str, pending_pods: int) -> None:
        try:
            answer = self._client.invoke(FunctionName=self._function, InvocationType="Event", Payload=json.dumps(SCANNER_PAYLOAD).encode())
        except (ClientError, BotoCoreError) as error:
            raise ScannerWakeError(f"waking the scanner {self._function} ({reason}, {pending_pods} pods) failed: {error}") from error
        status = int(answer.get("StatusCode") or 0)
        if status != 202:
            raise ScannerWakeError(f"waking the scanner {self._function}: StatusCode {status}, expected 202")
