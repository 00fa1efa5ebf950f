"""Times as the commands show them to people: ISO-8601 in UTC with milliseconds and a Z
(2026-11-26T22:35:22.123Z), never bare epoch milliseconds."""

from __future__ import annotations

import datetime as dt


def iso_ms(ms: int) -> str:
    """Epoch milliseconds → 2026-11-26T22:35:22.123Z."""
    moment = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
