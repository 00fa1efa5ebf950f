"""The job id of a recurring schedule's tick: one id per tick, derived from the
schedule, so a tick can only ever be one job.

    @recurring:<name>:<generation>:<tick_ms>

`name` is the schedule's name, `generation` counts the definitions the name has had
(a replace with a different definition, or a resume, starts the next one), and
`tick_ms` is the tick's time in epoch milliseconds. An extra tick asked for by
run_recurring_now is ``@recurring:<name>:<generation>:<ms>r``, ms being when it was asked
for: the ``r`` tells it from the schedule's own ticks (which are never at that id), and it
sorts among them by time, so the schedule's ticks list shows it in its place. Whoever
makes a tick into a job (the node owning the schedule, or the client that creates it)
writes it under this id, and a job id is one job: two nodes making the same tick during
a hand-off write the same row.

Producers cannot schedule ids with the prefix (cluster/model/jobs.py). The fired record of a
tick carries ``"recurring": name`` and ``"tick_ms"``: cluster/model/envelope.py reads them
back from the id, so every way of building the record (the producer's envelope, a lean
envelope's tail from MySQL, a reload after Redis lost it, a dead-letter replay) has them.
"""

from __future__ import annotations

RECURRING_PREFIX = "@recurring:"
RUN_NOW_SUFFIX = "r"


def tick_job_id(name: str, generation: int, tick_ms: int) -> str:
    return f"{RECURRING_PREFIX}{name}:{generation}:{tick_ms}"


def run_now_job_id(name: str, generation: int, now_ms: int) -> str:
    return f"{RECURRING_PREFIX}{name}:{generation}:{now_ms}{RUN_NOW_SUFFIX}"


def is_run_now(job_id: str) -> bool:
    """Whether a tick's job id is an extra tick of run_recurring_now."""
    return parse_tick_id(job_id) is not None and job_id.endswith(RUN_NOW_SUFFIX)


def parse_tick_id(job_id: str) -> tuple[str, int, int] | None:
    """(name, generation, tick_ms) of a tick's job id (also of a run-now tick); None for
    any other id."""
    if not job_id.startswith(RECURRING_PREFIX):
        return None
    parts = job_id[len(RECURRING_PREFIX) :].rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    name, generation, tick = parts
    tick = tick.removesuffix(RUN_NOW_SUFFIX)
    if not (generation.isdigit() and generation.isascii() and tick.isdigit() and tick.isascii()):
        return None
    return name, int(generation), int(tick)
