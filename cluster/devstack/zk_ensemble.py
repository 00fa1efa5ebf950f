"""A ZooKeeper ensemble in the local stack: ``delayq services up --zk-ensemble 3``
(DELAYQ_SERVICES_ZK_ENSEMBLE=3), on the plain stack and the secure one.

Server 1 is the stack's ``zookeeper`` service; servers 2 and 3 are ``zookeeper-2`` and
``zookeeper-3`` on 12281 and 12381 (secure stack: 12282 and 12382; moved with
DELAYQ_SERVICES_[SECURE_]ZOOKEEPER_2_PORT and _3_). Each server listens for its peers
(quorum) on its client port + PEER_OFFSET and for leader elections on its client port +
ELECTION_OFFSET: 12191/12201, 12291/12301, 12391/12401 (secure: 12192/12202, …), all
on 127.0.0.1. Every server has the same zoo.cfg settings as a standalone one
(cluster/devstack/zookeeper.py) plus a ``server.N=`` line per server and its ``myid``.
The secure stack's digest auth needs nothing of the servers: delayq logs in and sets
its ACLs (DELAYQ_ZK_AUTH) on whichever server it reaches, and the ensemble replicates
them.

Like the MySQL servers, the extra servers are included when asked for or when an earlier
`up` made them (their folders exist), so `up`, `down`, `status` and `env` cover them
without the flag. A server of an ensemble serves requests only with a quorum, so `up`
waits for one (the probe asks `srvr`; `ruok` answers imok without a quorum).

Turning a standalone ZooKeeper into the ensemble keeps its data: the new servers start
from a copy of server 1's data (snapshots and transaction logs), so every server has
the same history and whichever is elected leader has it all (an empty server 2 or 3
elected first would make server 1 throw its data away). `up` refuses while server 1
still runs standalone (stop the stack first), and refuses to go back from an ensemble
to one server: server 1 alone could then write history the others never see.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

from cluster.devstack import zookeeper
from cluster.devstack.service import (
    HOST,
    Service,
    ServicesError,
    service_port,
    zk_ensemble_wanted,
)

MARKER = "QuorumPeerMain"
ENSEMBLE = 3  # the size of an ensemble: a quorum of two survives one server down
PEER_OFFSET = 10  # the quorum port: client port + 10
ELECTION_OFFSET = 20  # the leader election port: client port + 20
PORT_LIMIT = 32768  # below Linux's ephemeral range, where a client could hold the port


def server_name(number: int) -> str:
    """The service of server `number` (1, 2, 3): "zookeeper", "zookeeper-2", …"""
    return "zookeeper" if number == 1 else f"zookeeper-{number}"


def made(root: Path) -> bool:
    """Whether an earlier `up` of the stack under `root` made the ensemble."""
    return (root / server_name(2)).is_dir()


def size(root: Path) -> int:
    """How many servers: as asked for, or as an earlier `up` made (more if both, so a
    smaller count leaves no server behind that `down` would miss)."""
    return max(zk_ensemble_wanted() or 1, ENSEMBLE if made(root) else 1)


def names(root: Path) -> list[str]:
    return [server_name(number) for number in range(1, size(root) + 1)]


def peer_ports(client_port: int) -> tuple[int, int]:
    """The quorum and election ports of the server on `client_port`."""
    return client_port + PEER_OFFSET, client_port + ELECTION_OFFSET


def client_ports(root: Path, secure: bool) -> dict[str, int]:
    return {name: service_port(name, secure=secure) for name in names(root)}


def check_ports(ports: dict[str, int]) -> None:
    """Refuse client ports whose quorum or election port is out of range or meets
    another port of the ensemble."""
    taken: dict[int, str] = {}
    for name, port in ports.items():
        peer, election = peer_ports(port)
        roles = ((name, port), (f"{name} quorum", peer), (f"{name} election", election))
        for what, number in roles:
            if number >= PORT_LIMIT:
                raise ServicesError(
                    f"{what} port {number} (client port {port} + offset) is not below "
                    f"{PORT_LIMIT}: move {name} to a lower port"
                )
            if number in taken:
                raise ServicesError(
                    f"ZooKeeper ensemble: {what} port {number} is also {taken[number]}'s; "
                    f"its ports are the client port, + {PEER_OFFSET} and + {ELECTION_OFFSET}: "
                    "move one of the servers"
                )
            taken[number] = what


def server_lines(ports: list[int]) -> list[str]:
    """``server.N=host:quorum:election`` for servers 1.. on these client ports."""
    return [
        f"server.{number}={HOST}:{peer}:{election}"
        for number, (peer, election) in enumerate((peer_ports(p) for p in ports), start=1)
    ]


def _standalone_data(root: Path) -> Path | None:
    """Server 1's data, if it holds some from standalone days (no myid yet)."""
    data = root / server_name(1) / "data"
    if (data / "version-2").is_dir() and not (data / "myid").exists():
        return data / "version-2"
    return None


def _seed(data: Path, seed: Path) -> None:
    """A new server's data: a copy of server 1's standalone history, in place once whole."""
    if data.exists():
        return
    copying = data.with_name("data.copying")
    shutil.rmtree(copying, ignore_errors=True)
    shutil.copytree(seed, copying / "version-2")
    copying.rename(data)


def _prepare_member(
    svc: Service, *, number: int, lines: list[str], seed: Path | None, peers: list[Path]
) -> None:
    data = svc.dir / "data"
    if seed is not None:
        # The new servers start from server 1's standalone history (see the docstring),
        # each when it is prepared (they may start first), and all of them before server
        # 1 gets its myid: that file ends "standalone days", so an `up` cut short after
        # it would otherwise leave the others empty for good (two empty servers are a
        # quorum that truncates server 1).
        for target in [data] if number > 1 else peers:
            _seed(target, seed)
    zookeeper.prepare_server(svc, lines)
    (data / "myid").write_text(f"{number}\n")


def services(make: Callable[..., Service], root: Path, secure: bool) -> list[Service]:
    """The stack's ZooKeeper servers, built with the stack's `make(name, marker,
    prepare, command, probe)`: the standalone ``zookeeper``, or the three of the
    ensemble."""
    ports = client_ports(root, secure)
    if len(ports) == 1:
        return [make(server_name(1), MARKER, zookeeper.prepare, zookeeper.command, zookeeper.probe)]
    check_ports(ports)
    lines = server_lines(list(ports.values()))
    seed = _standalone_data(root)
    peers = [root / name / "data" for name in list(ports)[1:]]
    return [
        make(
            name,
            MARKER,
            functools.partial(_prepare_member, number=number, lines=lines, seed=seed, peers=peers),
            zookeeper.command,
            zookeeper.probe,
        )
        for number, name in enumerate(ports, start=1)
    ]


def hosts(root: Path, secure: bool = False) -> str:
    """DELAYQ_ZK_HOSTS: host:port of every server, comma-separated."""
    return ",".join(f"{HOST}:{port}" for port in client_ports(root, secure).values())


def refuse_change(root: Path, secure: bool) -> None:
    """Before `up`: refuse to go back from an ensemble to one server, and to start the
    ensemble around a server 1 that still runs standalone."""
    if zk_ensemble_wanted() == 1 and made(root):
        raise ServicesError(
            f"--zk-ensemble 1 (or DELAYQ_SERVICES_ZK_ENSEMBLE=1): {root} holds a ZooKeeper "
            f"ensemble of {ENSEMBLE}, which cannot go back to one server and keep its data; "
            "run it as it is (without the flag), or start over with "
            f"`delayq services down --purge{' --secure' if secure else ''}`"
        )
    if size(root) > 1 and mode_of(service_port(server_name(1), secure=secure)) == "standalone":
        raise ServicesError(
            f"{server_name(1)} runs standalone: stop the stack first "
            f"(`delayq services down{' --secure' if secure else ''}`), then `up` again with "
            f"--zk-ensemble {ENSEMBLE}; its data is kept and copied to the new servers"
        )


def mode_of(port: int) -> str | None:
    """srvr's Mode of the server on `port` (standalone, leader, follower); None when
    nothing answers or it serves no requests."""
    try:
        return zookeeper.mode(port)
    except OSError:
        return None


def modes(root: Path, secure: bool = False) -> dict[str, str | None]:
    """Each server's srvr Mode (None: down, or without a quorum)."""
    return {name: mode_of(port) for name, port in client_ports(root, secure).items()}


def leader(root: Path, secure: bool = False) -> str | None:
    """The name of the server that leads the ensemble now, or None (no quorum)."""
    for name, mode in modes(root, secure).items():
        if mode == "leader":
            return name
    return None
