"""The operations files shipped in ops/ are valid and match what nodes expose: the alert
rules and the example Prometheus config pass promtool, the Grafana dashboard is valid
JSON whose queries, like the rules', use only metrics a node serves, every alert links
to its runbook section in docs/operations.md, and docker-compose.yml probes the nodes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from actors.metrics import METRIC_NAMES
from devstack.packages import ensure_prometheus, find_program

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "ops" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "delayq.json"
RUNBOOK = ROOT / "docs" / "operations.md"
COMPOSE = ROOT / "docker-compose.yml"
METRIC = re.compile(r"\bdelayq_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


@pytest.fixture(scope="module")
def promtool() -> str:
    ensure_prometheus()  # Debian's prometheus package has promtool
    found = find_program("promtool")
    assert found is not None
    return found


def metric_names(text: str) -> set[str]:
    names = set()
    for name in METRIC.findall(text):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_NAMES:
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def test_alert_rules_pass_promtool(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_example_prometheus_config_passes_promtool(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def dashboard_panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def test_dashboard_is_valid_and_uses_only_metrics_nodes_serve() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    panels = dashboard_panels()
    assert panels and all(panel["targets"] for panel in panels)
    used = metric_names(" ".join(t["expr"] for p in panels for t in p["targets"]))
    assert used and used <= METRIC_NAMES, used - METRIC_NAMES
    # The panels the runbook points to exist.
    titles = " ".join(panel["title"] for panel in panels)
    for word in ("Lateness", "overdue", "Dead letters", "journal", "Slots held"):
        assert word in titles


def test_alert_rules_use_only_metrics_nodes_serve() -> None:
    used = metric_names(ALERTS.read_text())
    assert used <= METRIC_NAMES, used - METRIC_NAMES


def github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def alerts() -> list[tuple[str, dict[str, Any]]]:
    """(alert name, its annotations and labels as text) from alerts.yml, read without a
    YAML library: each `- alert:` block up to the next rule."""
    text = ALERTS.read_text()
    blocks = re.split(r"\n\s*- (?=alert:|record:)", text)
    found = []
    for block in blocks:
        if not block.startswith("alert:"):
            continue
        name = block.split("\n", 1)[0].removeprefix("alert:").strip()
        fields = {
            key: value.strip().strip('"')
            for key, value in re.findall(
                r"^\s+(severity|summary|description|runbook_url):(.*)$", block, re.M
            )
        }
        found.append((name, fields))
    return found


def test_every_alert_has_severity_text_and_a_runbook_section() -> None:
    anchors = {
        github_anchor(line.lstrip("#"))
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("#")
    }
    found = alerts()
    assert len(found) >= 8
    for name, fields in found:
        assert {"severity", "summary", "description", "runbook_url"} <= set(fields), name
        anchor = fields["runbook_url"].rsplit("#", 1)[1]
        assert anchor in anchors, f"{name}: no heading for #{anchor} in docs/operations.md"


def test_compose_probes_the_nodes() -> None:
    compose = COMPOSE.read_text()
    assert "DELAYQ_METRICS_PORT" in compose
    assert "healthcheck:" in compose and "node" in compose and "--check" in compose
