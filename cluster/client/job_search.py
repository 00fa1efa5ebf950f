"""Search jobs and cancel the jobs a search matches: DelayClient.search_jobs and
DelayClient.cancel_matching (cluster/client/delay_client.py) end here; the search itself
is cluster/store/search.py.

cancel_matching is confirmed like a purge an operator confirms: it lists the matching
jobs that can still be cancelled (pending or retrying), and cancels them only when the
caller's `expected` equals their number and, when given, its `selection` is the token
of that very set (a digest of their ids, which every answer carries); otherwise it
changes nothing and says the number and the token. A job that started or stopped
matching since the preview changes the token, so confirming by selection cancels the
set that was shown or nothing. At most CANCEL_MOST jobs a call: a wider filter is
refused (narrow it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from cluster.client.job_changes import JobChanges
from cluster.client.job_writer import UNREACHABLE
from cluster.errors import InvalidJob, OutcomeUnknown, StoreUnavailable
from cluster.model.changes import ChangeStatus
from cluster.model.contract import WAITING_STATUSES
from cluster.store.mysql_store import MySQLStore
from cluster.store.search import (
    LIMIT_MAX,
    JobPage,
    JobSearch,
    make_search,
    search_jobs,
    search_keys,
)

__all__ = ["CANCEL_MOST", "CancelMatching", "JobPage", "JobSearchActions"]

T = TypeVar("T")
# The most jobs one cancel_matching call cancels.
CANCEL_MOST = 10_000
# Cancels in flight at once (each is a Redis script and a MySQL UPDATE).
_CANCELS_AT_ONCE = 32


@dataclass(frozen=True)
class CancelMatching:
    """What cancel_matching did. matched: the matching jobs that could be cancelled when
    it looked; done False (expected missing or not matched): nothing was changed.
    Otherwise cancelled (now or before), already_final (fired, in flight, dead, expired
    or gone meanwhile) and unknown (a store failed: unknown_ids, safe to cancel again)."""

    matched: int
    done: bool
    cancelled: int = 0
    already_final: int = 0
    unknown: int = 0
    unknown_ids: list[str] = field(default_factory=list)
    selection: str = ""  # the token of the matched set (selection_of)


def selection_of(job_ids: Sequence[str]) -> str:
    """The token of a set of job ids: equal for the same set, whatever its order."""
    digest = hashlib.sha256()
    for job_id in sorted(job_ids):
        digest.update(job_id.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:32]


def due_ms(name: str, value: object) -> object:
    """Epoch ms of a due bound given as ms or an aware datetime (others pass through to
    make_search, which refuses them by name)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise InvalidJob(f"{name} must be an aware datetime (with a time zone) or epoch ms")
        return round(value.timestamp() * 1000)
    return value


def checked_search(
    *,
    topic: object = None,
    status: object = None,
    biz_id: object = None,
    biz_type: object = None,
    due_from: object = None,
    due_to: object = None,
    order: object = "soonest",
    limit: object = 100,
    cursor: object = None,
) -> JobSearch:
    """make_search, with due bounds as datetimes too."""
    return make_search(
        topic=topic,
        status=status,
        biz_id=biz_id,
        biz_type=biz_type,
        due_from=due_ms("due_from", due_from),
        due_to=due_ms("due_to", due_to),
        order=order,
        limit=limit,
        cursor=cursor,
    )


async def find_jobs(mysql: MySQLStore, search: JobSearch) -> JobPage:
    """One page of a checked search."""
    return await search_jobs(mysql, search)


async def cancel_matching(
    mysql: MySQLStore,
    changes: JobChanges,
    search: JobSearch,
    expected: object,
    selection: object = None,
) -> CancelMatching:
    """Cancel the pending and retrying jobs the search matches, if `expected` is their
    number and `selection` (when given) their token (module docstring)."""
    if expected is not None and (
        isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
    ):
        raise InvalidJob(
            f"expected must be an int >= 0 (the number to cancel), got {expected!r:.40}"
        )
    if selection is not None and (not isinstance(selection, str) or len(selection) > 64):
        raise InvalidJob("selection must be the token a preview answered (a short string)")
    waiting = [s for s in WAITING_STATUSES if not search.statuses or s in search.statuses]
    if not waiting:
        empty = selection_of([])
        done = expected == 0 and selection in (None, empty)
        return CancelMatching(matched=0, done=done, selection=empty)
    job_ids = await _matching_ids(mysql, replace(search, statuses=tuple(waiting)))
    token = selection_of(job_ids)
    if expected != len(job_ids) or selection not in (None, token):
        return CancelMatching(matched=len(job_ids), done=False, selection=token)
    gate = asyncio.Semaphore(_CANCELS_AT_ONCE)

    async def cancel_one(job_id: str) -> ChangeStatus | None:
        async with gate:
            try:
                return (await changes.cancel(job_id)).status
            except (OutcomeUnknown, StoreUnavailable):
                return None

    answers = await asyncio.gather(*(cancel_one(job_id) for job_id in job_ids))
    unknown_ids = [job_id for job_id, a in zip(job_ids, answers, strict=True) if a is None]
    cancelled = sum(1 for answer in answers if answer == ChangeStatus.CANCELLED)
    return CancelMatching(
        matched=len(job_ids),
        done=True,
        cancelled=cancelled,
        already_final=len(job_ids) - cancelled - len(unknown_ids),
        unknown=len(unknown_ids),
        unknown_ids=unknown_ids,
        selection=token,
    )


async def _matching_ids(mysql: MySQLStore, search: JobSearch) -> list[str]:
    """The job ids the search matches, through its pages; InvalidJob past CANCEL_MOST."""
    page = replace(search, limit=LIMIT_MAX, after=None, order="soonest")
    job_ids: list[str] = []
    while True:
        keys, cursor = await search_keys(mysql, page)
        job_ids += [job_id for _, job_id in keys]
        if len(job_ids) > CANCEL_MOST:
            raise InvalidJob(
                f"more than {CANCEL_MOST} jobs match, the most one call cancels: narrow "
                "the filter (a due range, a topic, a biz_type) and cancel in parts"
            )
        if cursor is None:
            return job_ids
        page = replace(page, after=keys[-1])


class JobSearchActions:
    """DelayClient's methods for the above; the client gives mysql and _job_changes()."""

    mysql: MySQLStore

    def _job_changes(self) -> JobChanges:
        raise NotImplementedError

    async def search_jobs(
        self,
        *,
        topic: str | None = None,
        status: str | Sequence[str] | None = None,
        biz_id: str | None = None,
        biz_type: str | None = None,
        due_from: int | dt.datetime | None = None,
        due_to: int | dt.datetime | None = None,
        order: str = "soonest",
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of the jobs matching every filter given, by due time ("soonest"
        first, or "latest"): status one or several of pending, retrying, fired,
        cancelled, dead, expired (none: any); due_from inclusive, due_to exclusive (epoch
        ms or aware datetimes); limit 1..1000. Give the page's next_cursor (with the same
        filters) for the next page; it is None after the last. InvalidJob: a bad argument."""
        search = checked_search(
            topic=topic,
            status=status,
            biz_id=biz_id,
            biz_type=biz_type,
            due_from=due_from,
            due_to=due_to,
            order=order,
            limit=limit,
            cursor=cursor,
        )
        return await _reached(find_jobs(self.mysql, search))

    async def cancel_matching(
        self,
        *,
        topic: str | None = None,
        status: str | Sequence[str] | None = None,
        biz_id: str | None = None,
        biz_type: str | None = None,
        due_from: int | dt.datetime | None = None,
        due_to: int | dt.datetime | None = None,
        expected: int | None = None,
        selection: str | None = None,
    ) -> CancelMatching:
        """Cancel the pending and retrying jobs matching the filters (as search_jobs),
        only if `expected` equals their number and `selection`, when given, is the
        token of that set; else change nothing and answer the number and the token
        (done False). Call it with expected=None to preview them; give the preview's
        selection back to cancel exactly the set it showed (expected alone confirms a
        count, not a set). At most 10,000 jobs: InvalidJob when more match (narrow the
        filter)."""
        search = checked_search(
            topic=topic,
            status=status,
            biz_id=biz_id,
            biz_type=biz_type,
            due_from=due_from,
            due_to=due_to,
        )
        changes = self._job_changes()
        return await _reached(cancel_matching(self.mysql, changes, search, expected, selection))


async def _reached(work: Awaitable[T]) -> T:
    """work, with MySQL unreachable raised as StoreUnavailable."""
    try:
        return await work
    except UNREACHABLE as exc:
        raise StoreUnavailable(f"MySQL is unreachable, the jobs were not searched: {exc}") from exc
