"""The job id of a recurring schedule's tick: one id per tick, derived from the
schedule, so a tick can only ever be one job.

    @recurring:<name>:<generation>:<tick_ms>

`name` is the schedule's name, `generation` counts the definitions the name has had
(a replace with a different definition starts the next one, cluster/client/recurring.py), and
`tick_ms` is the tick's time in epoch milliseconds. Whoever makes a tick into a job (the
node owning the schedule, or the client that creates it) writes it under this id, and a
job id is one job: two nodes making the same tick during a hand-off write the same row.

Producers cannot schedule ids with the prefix (cluster/model/jobs.py). The fired record of a
tick carries ``"recurring": name`` and ``"tick_ms"``: cluster/model/envelope.py reads them
back from the id, so every way of building the record (the producer's envelope, a lean
envelope's tail from MySQL, a reload after Redis lost it, a dead-letter replay) has them.
"""

from __future__ import annotations

RECURRING_PREFIX = "@recurring:"


def tick_job_id(name: str, generation: int, tick_ms: int) -> str:
    return f"{RECURRING_PREFIX}{name}:{generation}:{tick_ms}"


def parse_tick_id(job_id: str) -> tuple[str, int, int] | None:
    """(name, generation, tick_ms) of a tick's job id; None for any other id."""
    if not job_id.startswith(RECURRING_PREFIX):
        return None
    parts = job_id[len(RECURRING_PREFIX) :].rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    name, generation, tick = parts
    if not (generation.isdigit() and generation.isascii() and tick.isdigit() and tick.isascii()):
        return None
    return name, int(generation), int(tick)
