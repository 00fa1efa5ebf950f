"""Log lines as text for people, or as one JSON object per line for log pipelines.

    configure_logging("INFO", "json", node_id="node-a")

A JSON line has ts (UTC, ISO 8601 with ms), level, logger, msg, node_id, and slot and
job_id when the call passed them (`log.warning(..., extra={"slot": 7})`); an exception
adds exc (its traceback as text).

An outage of Kafka or ZooKeeper is one WARNING when it starts ("Kafka broker …
unreachable", "ZooKeeper unreachable") and one when it ends ("… reachable again"), with
a reminder every OUTAGE_REMINDER_S while it lasts: OutageFilter takes the connection
errors their client libraries (aiokafka, aiozk) log meanwhile, dozens a second with
tracebacks, down to DEBUG, where they stay in full (--log-level DEBUG shows them), and
so do delayq's own warnings that name Kafka's connection errors while Kafka is out.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import orjson
from aiokafka import errors as kafka_errors

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Fields a log call may pass in `extra` that JSON lines carry as their own keys.
CONTEXT_FIELDS = ("slot", "job_id")
# While an outage lasts, a line saying so this often.
OUTAGE_REMINDER_S = 300.0
# Kafka's outage ends with a metadata exchange that succeeds after this long without a
# connection error: with one broker of several down, the others keep answering
# metadata while the client still fails to reach that one.
KAFKA_QUIET_S = 1.0

log = logging.getLogger(__name__)


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "node_id": self.node_id,
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class Outage:
    """One service's outage as this process sees it: started by the first connection
    error, ended by a sign that it answers again; says both once, at WARNING."""

    def __init__(self, service: str) -> None:
        self.service = service  # "ZooKeeper", "Kafka broker 127.0.0.1:9092"
        self.since: float | None = None  # time.monotonic() of the first error
        self.last_error = 0.0
        self.reminded = 0.0
        self.hidden = 0  # errors taken down to DEBUG since it started

    @property
    def open(self) -> bool:
        return self.since is not None

    def failed(self, detail: str) -> None:
        now = time.monotonic()
        self.last_error = now
        if self.since is None:
            self.since = self.reminded = now
            self.hidden = 0
            log.warning(
                "%s unreachable (%s); its client's errors are logged at DEBUG until it "
                "answers again",
                self.service,
                detail,
            )
            return
        self.hidden += 1
        if now - self.reminded >= OUTAGE_REMINDER_S:
            self.reminded = now
            log.warning(
                "%s still unreachable after %.0f s (%d errors logged at DEBUG)",
                self.service,
                now - self.since,
                self.hidden,
            )

    def answered(self, detail: str = "", quiet_s: float = 0.0) -> None:
        """The service answered: the end of the outage, if one is under way and no
        error came in the last quiet_s."""
        now = time.monotonic()
        if self.since is None or now - self.last_error < quiet_s:
            return
        log.warning(
            "%s reachable again%s after %.1f s (%d errors logged at DEBUG)",
            self.service,
            f" ({detail})" if detail else "",
            now - self.since,
            self.hidden,
        )
        self.since = None


# One per process: every client of the service feeds it, whatever handler is in place.
KAFKA = Outage("Kafka broker")
ZOOKEEPER = Outage("ZooKeeper")

# aiozk's log lines (their format strings) that mean the server could not be reached.
_ZK_ERRORS = frozenset(
    {
        "Couldn't connect to %s:%s",
        "No servers available, will keep trying.",
        "Error reading connect response.",
        "Error reading response.",
        "Exception during write",
        "Aborting connection to %s:%s",
        "Send exception: %s",
        "in heartbeat: %s",
        "Got 'disconnected' watch event.",
        "Pendings: %s; specials: %s",
        "ABORT Timeout",
    }
)
# ... those that are only its aftermath while an outage lasts ...
_ZK_AFTERMATH = frozenset({"Got 'session expired' watch event."})
# ... and its INFO lines about (re)connecting, a few per session: DEBUG (the node
# logs its own line when it joins), and "Connected to" ends an outage.
_ZK_CONNECTED = "Connected to %s:%s"
_ZK_CHATTER = frozenset(
    {
        "Connecting to %s:%s",
        _ZK_CONNECTED,
        "Establishing session. %r",
        "Got session id %s",
        "Negotiated timeout: %s seconds",
        "Got 'connected' watch event.",
    }
)
# aiokafka's errors that mean a broker could not be reached, those that follow while
# one restarts, and a line that means it on its own.
_KAFKA_ERRORS = (
    OSError,
    TimeoutError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaTimeoutError,
)
_KAFKA_AFTERMATH = (
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.LeaderNotAvailableError,
    kafka_errors.CoordinatorNotAvailableError,
    kafka_errors.NotCoordinatorForGroupError,
)
_KAFKA_UNREACHABLE = "Unable to update metadata from %s"
# While Kafka is unreachable, delayq's own warnings that name one of these errors (a
# batch of a slot not published, say) tell nothing the outage's line does not.
_KAFKA_ERROR_NAMES = tuple(error.__name__ for error in _KAFKA_ERRORS[2:])


def _from(record: logging.LogRecord, package: str) -> bool:
    return record.name == package or record.name.startswith(package + ".")


def _summary(record: logging.LogRecord) -> str:
    """The record's message, and its exception's in one line."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        text = f"{text} {type(error).__name__}: {error}".rstrip(": ")
    return text


def _kafka_errors(record: logging.LogRecord) -> list[BaseException]:
    args = record.args if isinstance(record.args, tuple) else ()
    found = [arg for arg in args if isinstance(arg, BaseException)]
    if record.exc_info and record.exc_info[1] is not None:
        found.append(record.exc_info[1])
    return found


class OutageFilter(logging.Filter):
    """A handler's filter: the connection errors of aiokafka and aiozk go to KAFKA and
    ZOOKEEPER (their first one becomes the outage's WARNING) and pass on as DEBUG
    records, dropped unless `level` is DEBUG, as do aiozk's lines about connecting
    and, while Kafka is out, warnings naming its connection errors; aiozk's "Connected
    to" ends a ZooKeeper outage. Every other record passes unchanged."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if self._demoted(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self.level <= logging.DEBUG
        # configure_logging lets aiozk's session log at INFO whatever the level.
        return record.levelno >= self.level or not _from(record, "aiozk")

    def _demoted(self, record: logging.LogRecord) -> bool:
        """Whether the record goes down to DEBUG (after telling its outage)."""
        if _from(record, "aiozk"):
            template = record.msg
            if template in _ZK_ERRORS and record.levelno >= logging.WARNING:
                ZOOKEEPER.failed(_summary(record))
                return True
            if template == _ZK_CONNECTED:
                ZOOKEEPER.answered(f"connected to {record.getMessage()[len('Connected to ') :]}")
            return template in _ZK_CHATTER or (template in _ZK_AFTERMATH and ZOOKEEPER.open)
        if _from(record, "aiokafka") and record.levelno >= logging.WARNING:
            errors = _kafka_errors(record)
            if record.msg == _KAFKA_UNREACHABLE or any(
                isinstance(e, _KAFKA_ERRORS) for e in errors
            ):
                KAFKA.failed(_summary(record))
                return True
            return KAFKA.open and any(isinstance(e, _KAFKA_AFTERMATH) for e in errors)
        if KAFKA.open and record.levelno == logging.WARNING and record.name != log.name:
            message = record.getMessage()
            if any(name in message for name in _KAFKA_ERROR_NAMES):
                KAFKA.hidden += 1
                return True
        return False


def kafka_answered(_metadata: object = None) -> None:
    """A listener for aiokafka's ClusterMetadata (`client.cluster.add_listener`): a
    successful metadata exchange ends a Kafka outage."""
    KAFKA.answered(quiet_s=KAFKA_QUIET_S)


def name_kafka(bootstrap: str) -> None:
    """Name the brokers in the outage lines (the bootstrap servers of the settings)."""
    KAFKA.service = f"Kafka broker {bootstrap}" if bootstrap else "Kafka broker"


def configure_logging(level: str, log_format: str, node_id: str) -> None:
    """Log to stderr at `level`, as "text" or "json" (replacing earlier handlers), with
    Kafka and ZooKeeper outages told in one line each way (OutageFilter)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(node_id))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler.addFilter(OutageFilter(numeric))
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    # aiozk's INFO line "Connected to" ends a ZooKeeper outage: it must reach the
    # filter (which drops it below `level`) even when the level or a command (web,
    # top) asks for less of aiozk.
    logging.getLogger("aiozk.session").setLevel(min(numeric, logging.INFO))
