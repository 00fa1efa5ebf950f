"""The production shape's profile (cluster/devstack/production.py): the settings its
cluster runs with and the commands of its parts, without starting anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster.devstack import production
from cluster.devstack.service import ServicesError


@pytest.fixture
def shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DELAYQ_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DELAYQ_STATE_DIR", str(tmp_path))
    for name, value in production.SHAPE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(production.ENTERED, "0")
    production.enter()  # on monkeypatched variables: undone after the test
    assert production.root() == tmp_path / "production"


def test_every_server_of_the_shape_holds_the_cluster_database(shape: None) -> None:
    env = production.settings_env()
    assert env["DELAYQ_MYSQL_URL"].endswith(":13306/delayq_prod")
    extra = env["DELAYQ_MYSQL_SERVERS"].split()
    assert [url.rsplit("/", 1)[1] for url in extra] == ["delayq_prod", "delayq_prod"]
    assert [url.split("@")[1].split("/")[0] for url in extra] == [
        "127.0.0.1:13316",
        "127.0.0.1:13326",
    ]
    assert env["DELAYQ_REDIS_URL"].startswith("redis+cluster://")
    assert env["DELAYQ_REDIS_WAIT_REPLICAS"] == "1"
    assert len(env["DELAYQ_KAFKA_BOOTSTRAP"].split(",")) == 3
    assert env["DELAYQ_KEY_PREFIX"] == "prod"


def test_each_part_runs_its_own_command_with_its_own_port(shape: None) -> None:
    parts = {svc.name: svc for svc in production.parts()}
    assert list(parts) == ["node-1", "node-2", "node-3", "web", "ingress"]
    node = parts["node-2"].command(parts["node-2"])
    assert "DELAYQ_NODE_ID=node-2" in node and "DELAYQ_METRICS_PORT=18472" in node
    assert node[-3:] == ["node", "--ready-file", str(parts["node-2"].dir / "ready")]
    web = parts["web"].command(parts["web"])
    assert web[-5:] == ["web", "--host", "127.0.0.1", "--port", "18470"]
    assert f"DELAYQ_METRICS_PORT={production.WEB_METRICS_PORT}" in web
    assert parts["ingress"].command(parts["ingress"])[-3] == "ingress"
    assert len({svc.port for svc in parts.values()} | {production.WEB_METRICS_PORT}) == 6


def test_the_long_running_node_is_a_part_once_made(shape: None) -> None:
    assert production.part("node-4").port == 18476
    production.part("node-4").dir.mkdir(parents=True)
    assert [svc.name for svc in production.parts()][-1] == "node-4"
    with pytest.raises(ServicesError, match="no part named 'node-9'"):
        production.part("node-9")
