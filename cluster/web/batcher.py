"""Concurrent one-job requests stored together: one MySQL transaction and one Redis
round trip for every job that arrived while the previous store was in flight.

Each request is validated on its own first (a bad job gets its own 422 and holds back
no one), then waits in `pending`. A single drain task stores everything pending as one
schedule_validated() call, and again for whatever arrived meanwhile, until nothing is
left: under load, batches grow with the number of requests in flight, and an idle
server stores a lone request at once. Each request gets its own answer: its Scheduled,
or the error of its store (StoreUnavailable for all of them; OutcomeUnknown and
RedisStepFailed naming that request's job only).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cluster.client.delay_client import DelayClient, Scheduled
from cluster.errors import OutcomeUnknown
from cluster.model.jobs import ValidJob

# Jobs stored per call at most: a batch stays a short transaction.
MAX_JOBS = 1000


@dataclass
class _Waiting:
    job: ValidJob
    keyed: bool  # the caller gave the job_id
    answer: asyncio.Future[Scheduled]


class ScheduleBatcher:
    def __init__(self, client: DelayClient) -> None:
        self.client = client
        self._pending: list[_Waiting] = []
        self._drain: asyncio.Task[None] | None = None
        self.batches = 0  # store calls made, for tests and benchmarks
        self.jobs = 0

    async def schedule(self, job: ValidJob, keyed: bool) -> Scheduled:
        answer: asyncio.Future[Scheduled] = asyncio.get_running_loop().create_future()
        self._pending.append(_Waiting(job, keyed, answer))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._store_pending(), name="schedule-batcher")
        return await answer

    async def _store_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:MAX_JOBS], self._pending[MAX_JOBS:]
            self.batches += 1
            self.jobs += len(batch)
            keyed = {w.job.job_id for w in batch if w.keyed}
            try:
                results = await self.client.schedule_validated([w.job for w in batch], keyed)
            except OutcomeUnknown as exc:
                kind = type(exc)
                for waiting in batch:
                    one = kind(str(exc), [waiting.job.job_id])
                    one.__cause__ = exc.__cause__
                    _fail(waiting, one)
            except Exception as exc:  # StoreUnavailable and anything else: all alike
                for waiting in batch:
                    _fail(waiting, exc)
            else:
                for waiting, result in zip(batch, results, strict=True):
                    if not waiting.answer.done():
                        waiting.answer.set_result(result)


def _fail(waiting: _Waiting, error: BaseException) -> None:
    if not waiting.answer.done():  # its request may have gone (client disconnected)
        waiting.answer.set_exception(error)
