"""Which Kafka broker the local stack runs, and what follows from the choice: its
services (Apache Kafka's nodes, or Tansu with its TLS front in the secure stack), the
bootstrap list and client settings, a new Kafka cluster when the number of nodes
changes, and stopping the other broker's processes after a switch.

Apache Kafka is the default (cluster/devstack/kafka.py); DELAYQ_SERVICES_KAFKA=tansu
(``delayq services up --kafka tansu``) picks Tansu (cluster/devstack/tansu.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

from cluster.devstack import kafka, kafka_acls, processes, tansu
from cluster.devstack import secure as secure_stack
from cluster.devstack.service import (
    HOST,
    Service,
    ServicesError,
    kafka_broker_wanted,
    kafka_brokers_wanted,
    service_port,
)

# What the processes of either broker's services run.
_BROKER_MARKERS = (kafka.MAIN_CLASS, "tansu", "stunnel")


def services(make: Callable[..., Service], root: Path, secure: bool) -> list[Service]:
    """The broker's services, built with the stack's `make(name, marker, prepare,
    command, probe)`."""
    if kafka_broker_wanted() == "apache":
        names = kafka.node_names(kafka_brokers_wanted(root))
        ports = {name: service_port(name, secure=secure) for name in names}
        prepare = kafka.prepare_with(ports)
        return [make(name, kafka.MAIN_CLASS, prepare, kafka.command, kafka.probe) for name in names]
    if secure:
        # Tansu listens in plain text behind a TLS front (cluster/devstack/tansu.py).
        return [
            make("kafka-broker", "tansu", tansu.prepare, tansu.command, tansu.probe_listening),
            make("kafka", "stunnel", tansu.prepare_tls_front, tansu.tls_front_command, tansu.probe),
        ]
    return [make("kafka", "tansu", tansu.prepare, tansu.command, tansu.probe)]


def bootstrap(root: Path, *, secure: bool = False) -> str:
    """host:port of every Kafka node of the stack, comma-separated."""
    if kafka_broker_wanted() == "tansu":
        return f"{HOST}:{service_port('kafka', secure=secure)}"
    names = kafka.node_names(kafka_brokers_wanted(root))
    return ",".join(f"{HOST}:{service_port(name, secure=secure)}" for name in names)


def kafka_env() -> dict[str, str]:
    """Tansu rejects InitProducerId: the idempotent producer must be off against it."""
    return {"DELAYQ_KAFKA_IDEMPOTENCE": "false"} if kafka_broker_wanted() == "tansu" else {}


def secure_kafka_env(keys: secure_stack.Secrets) -> dict[str, str]:
    """How a client reaches the secure stack's broker (its CA is set by the caller)."""
    if kafka_broker_wanted() == "tansu":
        # TLS through the front; Tansu cannot do SASL here (cluster/devstack/tansu.py).
        return {"DELAYQ_KAFKA_SECURITY_PROTOCOL": "SSL", **kafka_env()}
    return {
        "DELAYQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "DELAYQ_KAFKA_SASL_MECHANISM": kafka.SCRAM,
        # The nodes' user, with the ACLs of docs/security.md and no more.
        "DELAYQ_KAFKA_SASL_USERNAME": kafka_acls.NODE_USER,
        "DELAYQ_KAFKA_SASL_PASSWORD": keys.password(kafka.USERS[kafka_acls.NODE_USER]),
        # The tests create and read their topics as the admin (a super user).
        "DELAYQ_TEST_KAFKA_ADMIN_USERNAME": kafka.ADMIN_USER,
        "DELAYQ_TEST_KAFKA_ADMIN_PASSWORD": keys.password(kafka.USERS[kafka.ADMIN_USER]),
    }


def start_anew_on_a_new_count(root: Path, secure: bool) -> None:
    """A new number of Kafka nodes, or (secure) other SCRAM users, need a new Kafka
    cluster: its data starts anew, once the old nodes are stopped."""
    if not (kafka.brokers_changed(root) or (secure and kafka.users_changed(root))):
        return
    wanted = kafka_brokers_wanted()
    for name in kafka.node_names(3):
        pid = processes.read_pid_file(root / name / f"{name}.pid")
        if pid is not None and processes.alive(pid):
            flag = " --secure" if secure else ""
            raise ServicesError(
                f"Kafka runs with another number of brokers than {wanted}: run "
                f"`delayq services down{flag}` first (its topics start anew)"
            )
    print(f"kafka: a new cluster of {wanted} broker(s); the old one's topics are dropped")
    kafka.forget_data(root)


def stop_the_other_broker(stack: list[Service], root: Path) -> None:
    """Stop the broker processes of the stack's other broker choice, if any run (a
    switch of broker would leave them behind otherwise)."""
    known = {svc.name for svc in stack}
    for name in ("kafka", "kafka-broker", *kafka.node_names(3)):
        path = root / name / f"{name}.pid"
        pid = processes.read_pid_file(path)
        if name in known or pid is None:
            continue
        line = processes.cmdline(pid) or ""
        if processes.alive(pid) and any(marker in line for marker in _BROKER_MARKERS):
            processes.stop_pid(pid)
            print(f"{name:<13}{'':<17}stopped (pid {pid}, the other broker)", flush=True)
        path.unlink(missing_ok=True)


def ask_kafka_nodes_to_stop(stack: list[Service]) -> set[int]:
    """SIGTERM every Apache Kafka node at once (stopped one after another, the last ones
    can wait in a controlled shutdown for a quorum that is already gone); their pids."""
    asked: set[int] = set()
    for svc in stack:
        if svc.marker != kafka.MAIN_CLASS:
            continue
        pid = processes.read_pid(svc)
        if pid is not None and processes.is_ours(svc, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                asked.add(pid)
    return asked
