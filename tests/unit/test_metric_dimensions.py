"""Every metric names its cluster, and the alarms read exactly the dimension set the
functions emit (issue 16 §4: two clusters in one account and region share no alarm)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.monitoring import metric_dimensions
from joiner import observability
from joiner.settings import get_settings


class Context:
    function_name = "joiner-scanner"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:joiner-scanner"
    aws_request_id = "req-1"


def _emitted(text: str) -> dict[str, dict[str, str]]:
    """Metric name -> its dimensions (name -> value) from EMF lines."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            (dimension_set,) = directive["Dimensions"]
            for metric in directive["Metrics"]:
                found[metric["Name"]] = {name: blob[name] for name in dimension_set}
    return found


@pytest.fixture
def cluster_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(name: str) -> None:
        monkeypatch.setenv("JOINER_CLUSTER_NAME", name)
        monkeypatch.setenv("JOINER_STATE_TABLE", "state")
        monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
        get_settings.cache_clear()

    yield use
    get_settings.cache_clear()


@observability.handler_entry
def _decide(event: Any, context: Any) -> None:
    observability.count("PendingPodAgeSeconds", 42, "Seconds")
    observability.count("NodesTerminated", reason="expired")


# One execution environment serves one cluster; this test switches, which powertools notes.
@pytest.mark.filterwarnings("ignore:Dimension 'cluster' has already been added")
def test_alarmed_and_broken_down_metrics_name_the_cluster(cluster_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for cluster in ("prod-a", "prod-b"):
        cluster_env(cluster)
        _decide({}, Context())
        emitted = _emitted(capsys.readouterr().out)
        # The alarm's dimension map (infra.monitoring) is exactly what the function emits.
        assert emitted["PendingPodAgeSeconds"] == metric_dimensions(cluster)
        assert emitted["NodesTerminated"] == {**metric_dimensions(cluster), "reason": "expired"}
