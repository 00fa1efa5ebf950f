"""Log lines as text for people, or as one JSON object per line for log pipelines.

    configure_logging("INFO", "json", node_id="node-a")

A JSON line has ts (UTC, ISO 8601 with ms), level, logger, msg, node_id, and slot and
job_id when the call passed them (`log.warning(..., extra={"slot": 7})`); an exception
adds exc (its traceback as text).
"""

from __future__ import annotations

import datetime as dt
import logging

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Fields a log call may pass in `extra` that JSON lines carry as their own keys.
CONTEXT_FIELDS = ("slot", "job_id")


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


def configure_logging(level: str, log_format: str, node_id: str) -> None:
    """Log to stderr at `level`, as "text" or "json" (replacing earlier handlers)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter(node_id))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
