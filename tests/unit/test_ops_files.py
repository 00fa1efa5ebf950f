"""The operations files shipped in ops/ match what nodes expose (no program needed;
the promtool checks are tests/test_promtool.py).

- The Grafana dashboard is valid JSON, and every panel has a unique id and a query.
- The dashboard and the rules use only metric names a node or an ingress serves
  (actors.metrics.METRIC_NAMES, cluster.ingress.metrics.METRIC_NAMES) and only lateness
  buckets a node writes; the dashboard shows every one of them.
- Every alert has a severity, a summary, a description and a runbook_url whose anchor is
  a heading of docs/operations.md.
- docker-compose.yml gives the node a metrics port and a health check on it.

No YAML library is needed: alerts.yml and docker-compose.yml are read with PyYAML only
when it is installed.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

from actors.histogram import LATENESS_BUCKETS_S, Histograms
from actors.metrics import METRIC_NAMES as NODE_METRIC_NAMES
from cluster.ingress.metrics import METRIC_NAMES as INGRESS_METRIC_NAMES

# What the dashboard and the rules may use: a node's series and an ingress's.
METRIC_NAMES = NODE_METRIC_NAMES | INGRESS_METRIC_NAMES

yaml: Any
try:  # not a dependency of delayq: without it the tests read the text
    yaml = importlib.import_module("yaml")
except ImportError:
    yaml = None

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "ops" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "delayq.json"
RUNBOOK = ROOT / "docs" / "operations.md"
COMPOSE = ROOT / "docker-compose.yml"
RUNBOOK_URL = "https://github.com/delayq/delayq/blob/main/docs/operations.md#"

METRIC = re.compile(r"\bdelayq_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
LE_MATCHER = re.compile(r"""\ble\s*=~?\s*\\?["']([^"'\\]+)""")


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
