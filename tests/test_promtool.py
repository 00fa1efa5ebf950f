"""The operations files checked with Debian's promtool (package `prometheus`, installed
when missing): the alert rules and the example Prometheus config pass `promtool check`,
every dashboard query is valid PromQL, and the alerts fire (and stay quiet) as
docs/operations.md says, checked with `promtool test rules` on synthetic series shaped
like a node's /metrics. The checks that need no program are tests/unit/test_ops_files.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster.devstack.packages import ensure_prometheus, find_program
from tests.unit.test_ops_files import (
    ALERTS,
    PROMETHEUS_CONFIG,
    alerts,
    dashboard_queries,
)

# Prometheus rules and dashboard queries do not depend on the stack's shape.
pytestmark = pytest.mark.once


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's prometheus package has promtool; installed when missing, as for the
    Prometheus that scrapes a node in tests/test_operations.py."""
    ensure_prometheus()
    found = find_program("promtool")
    assert found is not None
    return found


def run_promtool(promtool: str, *args: str) -> None:
    checked = subprocess.run(
        [promtool, *args], capture_output=True, text=True, check=False, timeout=120
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Each query, with the dashboard's variables filled in, as a recording rule."""
    rules = [
        {"record": f"dashboard:panel_{name}", "expr": expr.replace("$node", ".*")}
        for name, expr in dashboard_queries()
    ]
    checked = tmp_path / "dashboard_queries.yml"
    checked.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool(promtool, "check", "rules", str(checked))


# ----- the alert rules ----------------------------------------------------------------


def test_alert_rules_pass_promtool(promtool: str) -> None:
    run_promtool(promtool, "check", "rules", str(ALERTS))


def test_example_prometheus_config_passes_promtool(promtool: str) -> None:
    run_promtool(promtool, "check", "config", str(PROMETHEUS_CONFIG))
    config = PROMETHEUS_CONFIG.read_text()
    assert "job_name: delayq" in config and "alerts.yml" in config


def without_annotations(rules: str) -> str:
    """alerts.yml without its annotations: `promtool test rules` compares them verbatim,
    and their wording is checked above."""
    kept, skip_deeper_than = [], -1
    for line in rules.splitlines():
        indent = len(line) - len(line.lstrip())
        if skip_deeper_than >= 0 and (not line.strip() or indent > skip_deeper_than):
            continue
        skip_deeper_than = -1
        if line.strip() == "annotations:":
            skip_deeper_than = indent
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    labels = {"job": "delayq", "instance": "n1:9464", **labels}
    text = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


def lateness(count: str, within_1s: str) -> list[dict[str, str]]:
    """A topic's lateness histogram: all jobs, and those acked within 1 s."""
    return [
        series("delayq_fire_lateness_seconds_count", count, topic="orders"),
        series("delayq_fire_lateness_seconds_bucket", within_1s, topic="orders", le="1.0"),
    ]


def expect(at: str, alert: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [{"exp_labels": labels} for labels in fired],
    }


PAGE = {"severity": "page"}
TICKET = {"severity": "ticket"}
NODE1 = {"job": "delayq", "instance": "n1:9464"}
NODE2 = {"job": "delayq", "instance": "n2:9464"}
INGRESS = {"job": "delayq-ingress", "instance": "i1:9465"}

ALERT_SCENARIOS: list[dict[str, Any]] = [
    # 10 jobs/s, 30 % of them later than 1 s: both burn rates are far above their bound.
    {
        "input_series": lateness("0+600x90", "0+420x90"),
        "alert_rule_test": [
            expect("10m", "DelayqLatenessSLOBurnFast", PAGE),
            expect("30m", "DelayqLatenessSLOBurnSlow", PAGE),
        ],
    },
    # 0.5 % late, then an idle cluster (no job fired for hours): never an SLO alert.
    {
        "input_series": lateness("0+600x30 18000x240", "0+597x30 17910x240"),
        "alert_rule_test": [
            expect("25m", "DelayqLatenessSLOBurnFast"),
            expect("4h", "DelayqLatenessSLOBurnFast"),
            expect("4h", "DelayqLatenessSLOBurnSlow"),
        ],
    },
    # Half of very few jobs late (10 in 100 minutes): too few to page anyone.
    {
        "input_series": lateness("0+0.1x100", "0+0.05x100"),
        "alert_rule_test": [
            expect("90m", "DelayqLatenessSLOBurnFast"),
            expect("90m", "DelayqLatenessSLOBurnSlow"),
        ],
    },
    # A burst of lateness that ended: the short window stops the fast burn alert.
    {
        "input_series": lateness("0+600x20 12000+600x60", "0+300x20 6000+600x60"),
        "alert_rule_test": [
            expect("15m", "DelayqLatenessSLOBurnFast", PAGE),
            expect("35m", "DelayqLatenessSLOBurnFast"),
        ],
    },
    # Overdue: n1's oldest job is 40 s late and getting later, n2's 20 s.
    {
        "input_series": [
            series("delayq_overdue_seconds", "40+60x10"),
            series("delayq_overdue_seconds", "20x10", instance="n2:9464"),
        ],
        "alert_rule_test": [
            expect("1m", "DelayqOverdueJobs"),  # pending: not yet 2 minutes
            expect("3m", "DelayqOverdueJobs", {**PAGE, "instance": "n1:9464"}),
        ],
    },
    # 16 slots, the two nodes hold 15 for three minutes, then all 16.
    {
        "input_series": [
            series("delayq_cluster_slots", "16x8"),
            series("delayq_cluster_slots", "16x8", instance="n2:9464"),
            series("delayq_slots_owned", "8x8"),
            series("delayq_slots_owned", "7x3 8x5", instance="n2:9464"),
        ],
        "alert_rule_test": [
            expect("2m", "DelayqSlotWithoutOwner", PAGE),
            expect("6m", "DelayqSlotWithoutOwner"),
        ],
    },
    # n1 cannot be scraped; then neither can n2.
    {
        "input_series": [
            {"series": 'up{job="delayq",instance="n1:9464"}', "values": "0x10"},
            {"series": 'up{job="delayq",instance="n2:9464"}', "values": "1x3 0x7"},
        ],
        "alert_rule_test": [
            expect("2m", "DelayqNodeDown", {**PAGE, **NODE1}),
            expect("2m", "DelayqNoNodeUp"),
            expect("8m", "DelayqNodeDown", {**PAGE, **NODE1}, {**PAGE, **NODE2}),
            expect("8m", "DelayqNoNodeUp", PAGE),
        ],
    },
    # Not ready and unhealthy for three minutes.
    {
        "input_series": [
            series("delayq_ready", "0x5"),
            series("delayq_ready", "1x5", instance="n2:9464"),
            series("delayq_healthy", "0x5"),
        ],
        "alert_rule_test": [
            expect("1m", "DelayqNodeNotReady"),
            expect("3m", "DelayqNodeNotReady", {**PAGE, **NODE1}),
            expect("3m", "DelayqNodeUnhealthy", {**PAGE, **NODE1}),
        ],
    },
    # The dispatcher crashes every minute.
    {
        "input_series": [series("delayq_actor_restarts_total", "0+1x20", actor="dispatcher")],
        "alert_rule_test": [
            expect("15m", "DelayqActorsRestarting", {**TICKET, **NODE1, "actor": "dispatcher"})
        ],
    },
    # Three jobs go dead, two expire; drift; frequent fencing.
    {
        "input_series": [
            series("delayq_jobs_dead_total", "0 0 0 3 3 3 3 3"),
            series("delayq_jobs_expired_total", "0 0 0 0 2 2 2 2"),
            series("delayq_jobs_readded_total", "0 0 0 0 25 25 25 25"),
            series("delayq_fenced_total", "0+5x20"),
        ],
        "alert_rule_test": [
            expect("2m", "DelayqDeadLettersGrowing"),
            expect("5m", "DelayqDeadLettersGrowing", TICKET),
            expect("3m", "DelayqJobsExpiring"),
            expect("6m", "DelayqJobsExpiring", TICKET),
            expect("6m", "DelayqRedisLostJobs", TICKET),
            expect("12m", "DelayqFencedOften", TICKET),
        ],
    },
    # A journal backlog growing past 10,000 alerts; a larger one that drains does not.
    {
        "input_series": [series("delayq_journal_backlog", "5000+1000x40")],
        "alert_rule_test": [
            expect("8m", "DelayqJournalBacklogGrowing"),
            expect("30m", "DelayqJournalBacklogGrowing", TICKET),
        ],
    },
    {
        "input_series": [series("delayq_journal_backlog", "60000-1000x40")],
        "alert_rule_test": [expect("30m", "DelayqJournalBacklogGrowing")],
    },
    # Node 1 fires to more topics than metrics_max_topics from minute 3; node 2 does not.
    {
        "input_series": [
            series("delayq_metrics_topics_folded", "0 0 0 5 12 12"),
            series("delayq_metrics_topics_folded", "0x5", instance="n2:9464"),
        ],
        "alert_rule_test": [
            expect("2m", "DelayqMetricsTopicsFolded"),
            expect("4m", "DelayqMetricsTopicsFolded", {**TICKET, "instance": "n1:9464"}),
        ],
    },
    # An ingress that stops answering from minute 3 (up 0): down after 2 minutes of it.
    {
        "input_series": [series("up", "1 1 1 0 0 0 0", **INGRESS)],
        "alert_rule_test": [
            expect("3m", "DelayqIngressDown"),
            expect("6m", "DelayqIngressDown", {**PAGE, **INGRESS}),
        ],
    },
    # Store failures every minute from minute 5 (and one error send failure early on,
    # which passes): only the lasting failures page.
    {
        "input_series": [
            series("delayq_ingress_store_failures_total", "0 0 0 0 0 0+1x20", **INGRESS),
            series("delayq_ingress_error_send_failures_total", "0 1 1x30", **INGRESS),
        ],
        "alert_rule_test": [
            expect("9m", "DelayqIngressStoreFailing"),
            expect("20m", "DelayqIngressStoreFailing", {**PAGE, "instance": "i1:9465"}),
        ],
    },
    # Two invalid records at minute 2; none after: a ticket that ends.
    {
        "input_series": [
            series("delayq_ingress_records_total", "0 0 2 2x30", result="invalid", **INGRESS),
            series("delayq_ingress_records_total", "0+100x30", result="scheduled", **INGRESS),
        ],
        "alert_rule_test": [
            expect("1m", "DelayqIngressRefusingRecords"),
            expect("5m", "DelayqIngressRefusingRecords", TICKET),
            expect("25m", "DelayqIngressRefusingRecords"),
        ],
    },
]


def test_alerts_fire_when_they_should(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yml"
    rules.write_text(without_annotations(ALERTS.read_text()))
    tests = [{"interval": "1m", **scenario} for scenario in ALERT_SCENARIOS]
    suite = tmp_path / "alerts_test.yml"
    suite.write_text(
        json.dumps({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests})
    )
    run_promtool(promtool, "test", "rules", str(suite))
    tested = {case["alertname"] for s in ALERT_SCENARIOS for case in s["alert_rule_test"]}
    assert tested == {name for name, _ in alerts()}, "every alert has a scenario"
