"""The ZooKeeper ensemble of the local stack (cluster/devstack/zk_ensemble.py): its ports,
its servers' config, and what `up` refuses, without starting anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster.devstack import galera, kafka, production, stack, zk_ensemble, zookeeper
from cluster.devstack.service import (
    CLUSTER_PORTS,
    DEFAULT_PORTS,
    KAFKA_PORTS,
    MYSQL_SERVERS_MAX,
    REPLICA_PORTS,
    SECURE_CLUSTER_PORTS,
    SECURE_KAFKA_PORTS,
    SECURE_PORTS,
    SECURE_REPLICA_PORTS,
    ServicesError,
    zk_ensemble_wanted,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DELAYQ_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DELAYQ_STATE_DIR", str(tmp_path))


def ensemble_ports(secure: bool) -> set[int]:
    """Every port of the ensemble: client, quorum and election ports of each server."""
    ports = zk_ensemble.client_ports(stack.stack_root(secure), secure).values()
    return {number for port in ports for number in (port, *zk_ensemble.peer_ports(port))}


def other_stack_ports() -> set[int]:
    """Every port the rest of the stack (and the Galera cluster, the production shape's
    processes) listens on."""
    kafka_ports = [*KAFKA_PORTS.values(), *SECURE_KAFKA_PORTS.values()]
    kafka_ports += [DEFAULT_PORTS["kafka"], SECURE_PORTS["kafka"]]
    return {
        *(port for name, port in DEFAULT_PORTS.items() if name != "zookeeper"),
        *(port for name, port in SECURE_PORTS.items() if name != "zookeeper"),
        *CLUSTER_PORTS.values(),
        *REPLICA_PORTS.values(),
        *SECURE_CLUSTER_PORTS.values(),
        *SECURE_REPLICA_PORTS.values(),
        *kafka_ports,
        *(kafka.controller_port(port) for port in kafka_ports),
        *(DEFAULT_PORTS["mysql"] + 10 * i for i in range(MYSQL_SERVERS_MAX)),
        *galera.MYSQL_PORTS,
        *(port + step for port in galera.GCOMM_PORTS for step in range(3)),
        *production.PORTS.values(),
        production.WEB_METRICS_PORT,
    }


def test_the_ensemble_is_three_servers_on_their_own_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    root = stack.stack_root()
    assert zk_ensemble.client_ports(root, False) == {
        "zookeeper": 12181,
        "zookeeper-2": 12281,
        "zookeeper-3": 12381,
    }
    assert list(zk_ensemble.client_ports(root, True).values()) == [12182, 12282, 12382]
    plain, secure = ensemble_ports(False), ensemble_ports(True)
    assert len(plain) == len(secure) == 9
    assert plain.isdisjoint(secure)
    assert (plain | secure).isdisjoint(other_stack_ports())
    assert max(plain | secure) < zk_ensemble.PORT_LIMIT


def test_each_server_lists_every_server_and_has_the_standalone_settings() -> None:
    lines = zk_ensemble.server_lines([12181, 12281, 12381])
    assert lines == [
        "server.1=127.0.0.1:12191:12201",
        "server.2=127.0.0.1:12291:12301",
        "server.3=127.0.0.1:12391:12401",
    ]
    standalone = zookeeper.config(Path("/d"), 12181).splitlines()
    member = zookeeper.config(Path("/d"), 12281, lines).splitlines()
    assert member == [*standalone[:7], "clientPort=12281", *standalone[8:], *lines]
    assert "4lw.commands.whitelist=ruok,stat,srvr" in member
    assert "tickTime=500" in member and "dataDir=/d" in member


def test_a_member_gets_its_myid_and_the_ensemble_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    servers = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    assert [(svc.name, svc.port) for svc in servers] == [
        ("zookeeper", 12181),
        ("zookeeper-2", 12281),
        ("zookeeper-3", 12381),
    ]
    for number, svc in enumerate(servers, start=1):
        svc.prepare(svc)
        assert (svc.dir / "data" / "myid").read_text() == f"{number}\n"
        assert "server.3=127.0.0.1:12391:12401" in (svc.dir / "zoo.cfg").read_text()


def test_new_servers_start_from_the_standalone_servers_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = stack.stack_root()
    standalone = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    assert [svc.name for svc in standalone] == ["zookeeper"]
    standalone[0].prepare(standalone[0])
    history = root / "zookeeper" / "data" / "version-2"
    history.mkdir()
    (history / "snapshot.0").write_bytes(b"the standalone history")
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    servers = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    for svc in servers:
        svc.prepare(svc)
    for name in ("zookeeper-2", "zookeeper-3"):
        copied = root / name / "data" / "version-2" / "snapshot.0"
        assert copied.read_bytes() == b"the standalone history"
    # Once members, no server's data is ever copied again.
    (history / "snapshot.0").write_bytes(b"later")
    for svc in [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]:
        svc.prepare(svc)
    assert (root / "zookeeper-2" / "data" / "version-2" / "snapshot.0").read_bytes() != b"later"


def test_an_up_cut_short_after_server_one_still_seeds_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Server 1 gets its myid (the end of standalone days) only after the others hold
    its history: an `up` that stops after preparing server 1 leaves nothing to lose."""
    root = stack.stack_root()
    standalone = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    standalone[0].prepare(standalone[0])
    history = root / "zookeeper" / "data" / "version-2"
    history.mkdir()
    (history / "snapshot.0").write_bytes(b"the standalone history")
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    first = next(svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER)
    first.prepare(first)  # and then the `up` is interrupted
    for name in ("zookeeper-2", "zookeeper-3"):
        copied = root / name / "data" / "version-2" / "snapshot.0"
        assert copied.read_bytes() == b"the standalone history"
        assert not (root / name / "data.copying").exists()


def test_servers_two_and_three_prepared_first_start_from_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They may start before server 1 (a quorum of two): each copies the history itself."""
    root = stack.stack_root()
    standalone = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    standalone[0].prepare(standalone[0])
    history = root / "zookeeper" / "data" / "version-2"
    history.mkdir()
    (history / "snapshot.0").write_bytes(b"the standalone history")
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    _, *others = [svc for svc in stack.services() if svc.marker == zk_ensemble.MARKER]
    for svc in others:
        svc.prepare(svc)
    for name in ("zookeeper-2", "zookeeper-3"):
        copied = root / name / "data" / "version-2" / "snapshot.0"
        assert copied.read_bytes() == b"the standalone history"


def test_the_ensemble_is_remembered_and_cannot_go_back(monkeypatch: pytest.MonkeyPatch) -> None:
    root = stack.stack_root()
    assert zk_ensemble.names(root) == ["zookeeper"]
    assert stack.stack_env()["DELAYQ_ZK_HOSTS"] == "127.0.0.1:12181"
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    assert stack.stack_env()["DELAYQ_ZK_HOSTS"] == (
        "127.0.0.1:12181,127.0.0.1:12281,127.0.0.1:12381"
    )
    (root / "zookeeper-2").mkdir(parents=True)
    monkeypatch.delenv("DELAYQ_SERVICES_ZK_ENSEMBLE")
    assert zk_ensemble.names(root) == ["zookeeper", "zookeeper-2", "zookeeper-3"]
    assert len(stack.stack_env()["DELAYQ_ZK_HOSTS"].split(",")) == 3
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "1")
    with pytest.raises(ServicesError, match="cannot go back to one server"):
        zk_ensemble.refuse_change(root, secure=False)


def test_moved_ports_move_their_peer_ports_and_clashes_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", "3")
    monkeypatch.setenv("DELAYQ_SERVICES_ZOOKEEPER_2_PORT", "27281")
    assert zk_ensemble.hosts(stack.stack_root()).split(",")[1] == "127.0.0.1:27281"
    monkeypatch.setenv("DELAYQ_SERVICES_ZOOKEEPER_2_PORT", "12191")  # server 1's quorum port
    with pytest.raises(ServicesError, match="port 12191 is also zookeeper quorum's"):
        stack.services()
    monkeypatch.setenv("DELAYQ_SERVICES_ZOOKEEPER_2_PORT", "32760")
    with pytest.raises(ServicesError, match="not below 32768"):
        stack.services()


@pytest.mark.parametrize("raw", ["2", "three", "0"])
def test_a_bad_ensemble_size_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("DELAYQ_SERVICES_ZK_ENSEMBLE", raw)
    with pytest.raises(ServicesError, match="1 or 3 ZooKeeper servers"):
        zk_ensemble_wanted()
    assert not (stack.stack_root() / "zookeeper-2").exists()


def test_the_production_shape_asks_for_the_ensemble(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in production.SHAPE.items():
        monkeypatch.setenv(name, value)
    assert zk_ensemble.names(stack.stack_root()) == ["zookeeper", "zookeeper-2", "zookeeper-3"]
