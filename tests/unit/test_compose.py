"""docker-compose.yml, read as YAML (no Docker engine needed): the delayq services run
the commands they are named for, and the Prometheus it runs scrapes every delayq metrics
port under the job names the alert rules select on, with the repository's rules, and
Grafana shows the repository's dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "delayq-migrate": ["db", "migrate"],
    "delayq-node": ["node"],
    "delayq-ingress": ["ingress"],
    "delayq-web": ["web"],
}
# The scrape job each delayq service's metrics belong to (ops/prometheus/alerts.yml).
JOBS = {"delayq-node": "delayq", "delayq-ingress": "delayq-ingress", "delayq-web": "delayq-web"}


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def scrape_ports() -> dict[str, set[int]]:
    """The ports the compose Prometheus scrapes, by job name."""
    config = yaml.safe_load(compose()["configs"]["prometheus-config"]["content"])
    ports: dict[str, set[int]] = {}
    for job in config["scrape_configs"]:
        found = ports.setdefault(job["job_name"], set())
        for static in job.get("static_configs", []):
            found |= {int(target.rsplit(":", 1)[1]) for target in static["targets"]}
        found |= {int(dns["port"]) for dns in job.get("dns_sd_configs", [])}
    return ports


def test_delayq_services_run_their_commands() -> None:
    services = compose()["services"]
    for name, command in COMMANDS.items():
        assert services[name]["command"][: len(command)] == command, name
        assert services[name]["profiles"] == ["nodes"]


def test_prometheus_scrapes_every_delayq_metrics_port() -> None:
    services = compose()["services"]
    ports = scrape_ports()
    for name, job in JOBS.items():
        port = int(services[name]["environment"]["DELAYQ_METRICS_PORT"])
        assert port in ports.get(job, set()), f"{name}'s metrics port {port} not in job {job}"
        assert str(port) in services[name]["expose"]


def test_prometheus_and_grafana_use_the_repository_files() -> None:
    services = compose()["services"]
    mounts = {
        name: [volume.split(":")[0] for volume in services[name]["volumes"]]
        for name in ("prometheus", "grafana")
    }
    assert "./ops/prometheus/alerts.yml" in mounts["prometheus"]
    assert "./ops/grafana/delayq.json" in mounts["grafana"]
    for mounted in [*mounts["prometheus"], *mounts["grafana"]]:
        if mounted.startswith("./"):
            assert (ROOT / mounted).is_file(), mounted
    config = yaml.safe_load(compose()["configs"]["prometheus-config"]["content"])
    assert config["rule_files"] == ["alerts.yml"]
    sources = yaml.safe_load(compose()["configs"]["grafana-datasource"]["content"])
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"
