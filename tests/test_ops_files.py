"""The operations files shipped in ops/ are valid and match what nodes expose.

- The alert rules and the example Prometheus config pass `promtool check`, and the alerts
  fire (and stay quiet) as docs/operations.md says, checked with `promtool test rules`
  on synthetic series shaped like a node's /metrics.
- The Grafana dashboard is valid JSON, every panel has a unique id and a query, and every
  query is valid PromQL.
- The dashboard and the rules use only metric names a node serves
  (actors.metrics.METRIC_NAMES) and only lateness buckets a node writes.
- Every alert has a severity, a summary, a description and a runbook_url whose anchor is
  a heading of docs/operations.md.
- docker-compose.yml gives the node a metrics port and a health check on it.

promtool comes from Debian's `prometheus` package; the tests that need it are skipped,
saying so, where it is missing. No YAML library is needed: Prometheus reads JSON as
YAML, so the files these tests hand to promtool are written as JSON, and alerts.yml and
docker-compose.yml are read with PyYAML only when it is installed.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from actors.histogram import LATENESS_BUCKETS_S, Histograms
from actors.metrics import METRIC_NAMES
from cluster.devstack.packages import ensure_prometheus, find_program

yaml: Any
try:  # not a dependency of delayq: without it the tests read the text
    yaml = importlib.import_module("yaml")
except ImportError:
    yaml = None

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "ops" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "delayq.json"
RUNBOOK = ROOT / "docs" / "operations.md"
COMPOSE = ROOT / "docker-compose.yml"
RUNBOOK_URL = "https://github.com/delayq/delayq/blob/main/docs/operations.md#"

METRIC = re.compile(r"\bdelayq_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
LE_MATCHER = re.compile(r"""\ble\s*=~?\s*\\?["']([^"'\\]+)""")


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


def metric_names(text: str) -> set[str]:
    """The delayq_* metric names in text, histogram series by their base name."""
    names = set()
    for name in METRIC.findall(text):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_NAMES:
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def node_bucket_bounds() -> set[str]:
    """The `le` values a node writes for its lateness and stage histograms."""
    histograms = Histograms(LATENESS_BUCKETS_S)
    histograms.observe(("any",), 0.5)
    (_, buckets, _), *_ = histograms.cumulative()
    return {le for le, _ in buckets}


# ----- the dashboard ------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def dashboard_panels() -> list[dict[str, Any]]:
    """Every panel that is not a row, also those inside collapsed rows."""
    found: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        found.extend(panel.get("panels", []) if panel["type"] == "row" else [panel])
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel id and refId, PromQL expression) of every dashboard query."""
    return [
        (f"{panel['id']}{target['refId']}", target["expr"])
        for panel in dashboard_panels()
        for target in panel["targets"]
    ]


def test_dashboard_is_valid_and_uses_only_metrics_nodes_serve() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in board["panels"]] + [
        inner["id"] for panel in board["panels"] for inner in panel.get("panels", [])
    ]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    panels = dashboard_panels()
    assert panels
    for panel in panels:
        assert panel.get("targets"), f"panel {panel['id']} {panel['title']!r} has no query"
        assert all(target.get("expr") for target in panel["targets"]), panel["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "label_values(delayq_node_info, instance)" in json.dumps(variables["node"])
    for panel in panels:
        for holder in [panel, *panel["targets"]]:
            assert holder["datasource"]["uid"] == "${datasource}", panel["title"]

    exprs = " ".join(expr for _, expr in dashboard_queries())
    used = metric_names(exprs)
    assert used and used <= METRIC_NAMES, used - METRIC_NAMES
    assert set(LE_MATCHER.findall(exprs)) <= node_bucket_bounds()
    # What the issue asks the dashboard to show, and the panels the runbook points to.
    for metric in METRIC_NAMES - {"delayq_node_info"}:  # node_info: in the `node` variable
        assert metric in used, f"no panel shows {metric}"
    assert "process_cpu_seconds_total" in exprs and "process_resident_memory_bytes" in exprs
    for quantile in ("0.5", "0.99", "0.999"):
        assert f"histogram_quantile({quantile}, " in exprs
    titles = " ".join(panel["title"] for panel in panels)
    for word in ("Lateness", "overdue", "Dead letters", "journal", "Slots held", "stage"):
        assert word in titles


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


def test_alert_rules_use_only_metrics_and_buckets_nodes_serve() -> None:
    text = ALERTS.read_text()
    used = metric_names(text)
    assert used <= METRIC_NAMES, used - METRIC_NAMES
    assert set(LE_MATCHER.findall(text)) <= node_bucket_bounds()


def alerts() -> list[tuple[str, dict[str, str]]]:
    """(alert name, its labels and annotations) from alerts.yml."""
    text = ALERTS.read_text()
    if yaml is not None:
        return [
            (rule["alert"], {**rule.get("labels", {}), **rule.get("annotations", {})})
            for group in yaml.safe_load(text)["groups"]
            for rule in group["rules"]
            if "alert" in rule
        ]
    # Without a YAML library: each `- alert:` block up to the next rule; a field is
    # `key: value` on one line, or `key: >-` followed by more indented lines.
    found = []
    for block in re.split(r"\n\s*- (?=alert:|record:)", text):
        if not block.startswith("alert:"):
            continue
        name = block.split("\n", 1)[0].removeprefix("alert:").strip()
        fields = {
            key: field_text(value, more)
            for key, value, more in re.findall(
                r"^\s+(severity|summary|description|runbook_url):([^\n]*)((?:\n\s{12,}\S.*)*)",
                block,
                re.M,
            )
        }
        found.append((name, fields))
    return found


def field_text(value: str, more_lines: str) -> str:
    """A YAML scalar's text: on its line, or folded from the lines after `>-` or `|`."""
    value = value.strip()
    if value in {"", ">", ">-", "|", "|-"}:
        value = " ".join(more_lines.split())
    return value.strip('"')


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (not of `#` lines in code blocks)."""
    anchors, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            anchors.add(github_anchor(line.lstrip("#")))
    return anchors


def test_every_alert_has_severity_text_and_a_runbook_section() -> None:
    anchors = markdown_anchors(RUNBOOK)
    found = alerts()
    names = {name for name, _ in found}
    assert len(names) == len(found), "alert names must be unique"
    # The alerts the issue asks for.
    assert {
        "DelayqLatenessSLOBurnFast",
        "DelayqLatenessSLOBurnSlow",
        "DelayqOverdueJobs",
        "DelayqSlotWithoutOwner",
        "DelayqDeadLettersGrowing",
        "DelayqJobsExpiring",
        "DelayqJournalBacklogGrowing",
        "DelayqNodeNotReady",
        "DelayqNodeUnhealthy",
        "DelayqNodeDown",
        "DelayqFencedOften",
        "DelayqRedisLostJobs",
    } <= names
    for name, fields in found:
        for field in ("severity", "summary", "description", "runbook_url"):
            assert fields.get(field), f"{name}: no {field}"
        assert fields["severity"] in {"page", "ticket"}, name
        assert fields["runbook_url"].startswith(RUNBOOK_URL), name
        anchor = fields["runbook_url"].removeprefix(RUNBOOK_URL)
        assert anchor in anchors, f"{name}: no heading for #{anchor} in docs/operations.md"
        assert f"`{name}`" in RUNBOOK.read_text(), f"{name} is not named in the runbook"


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


# ----- docker-compose.yml -------------------------------------------------------------


def compose_node_service() -> str | dict[str, Any]:
    """The delayq-node service: parsed with PyYAML if installed, else its text."""
    text = COMPOSE.read_text()
    if yaml is not None:
        service = yaml.safe_load(text)["services"]["delayq-node"]
        assert isinstance(service, dict)
        return service
    found = re.search(r"^  delayq-node:\n((?:    .*\n|\s*\n)+)", text, re.M)
    assert found, "docker-compose.yml has no delayq-node service"
    return found.group(1)


def test_compose_probes_the_nodes() -> None:
    assert "\t" not in COMPOSE.read_text(), "YAML does not allow tabs for indentation"
    node = compose_node_service()
    if isinstance(node, dict):
        assert str(node["environment"]["DELAYQ_METRICS_PORT"]) == "9464"
        probe = " ".join(map(str, node["healthcheck"]["test"]))
        published = " ".join(map(str, node.get("ports", []) + node.get("expose", [])))
    else:
        assert re.search(r"DELAYQ_METRICS_PORT:\s*\"?9464", node)
        found = re.search(r"healthcheck:\n((?:      .*\n)+)", node)
        assert found, "the delayq-node service has no healthcheck"
        probe = found.group(1).split("interval:")[0]
        published = node
    assert "/healthz" in probe or ("node" in probe and "--check" in probe), probe
    assert "9464" in published


# ----- the runbook ----------------------------------------------------------------------


def test_runbook_links_resolve() -> None:
    """Every relative link of docs/operations.md names a file that exists and, with an
    anchor, a heading in it: a reader at 3 a.m. follows them."""
    text = RUNBOOK.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        target, _, anchor = link.partition("#")
        path = (RUNBOOK.parent / target).resolve() if target else RUNBOOK
        assert path.exists(), f"docs/operations.md links to {link}: no such file"
        if anchor:
            assert anchor in markdown_anchors(path), (
                f"docs/operations.md: no #{anchor} in {path.name}"
            )
