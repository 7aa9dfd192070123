"""EventBridge schedules for the periodic functions."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

__all__ = ["Schedules", "SCHEDULE_MINUTES"]

#: function -> minutes between runs
SCHEDULE_MINUTES: Mapping[str, int] = {"scanner": 1, "disruption": 1, "gc": 5, "watcher": 1}


class Schedules(Construct):
    """One rate rule per entry in :data:`SCHEDULE_MINUTES` invoking the function
    asynchronously; a tick EventBridge could not deliver within a minute is dropped
    (the next tick does the same work)."""

    def __init__(self, scope: Construct, construct_id: str, *, functions: Mapping[str, lambda_.IFunction]) -> None:
        super().__init__(scope, construct_id)
        self.rules: dict[str, events.Rule] = {}
        for name, minutes in SCHEDULE_MINUTES.items():
            if name not in functions:
                continue  # the watcher exists in responsive mode only
            rule = events.Rule(
                self,
                f"{name.capitalize()}Schedule",
                description=f"Joiner: run {name} every {minutes} minute{'s' if minutes > 1 else ''}",
                schedule=events.Schedule.rate(Duration.minutes(minutes)),
            )
            rule.add_target(targets.LambdaFunction(functions[name], retry_attempts=2, max_event_age=Duration.seconds(60)))
            self.rules[name] = rule
