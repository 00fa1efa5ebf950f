"""cluster/store/stalls.py: a part of a call over several servers is cut off only when
another part has ended and its server has been silent for the bound; a lone part, or
one whose server answers, runs to its end."""

from __future__ import annotations

import asyncio

from cluster.errors import ServerStalled
from cluster.store.stalls import gather_servers

STALL_S = 0.05


async def never() -> str:
    await asyncio.Event().wait()
    return "never"


async def soon(value: str) -> str:
    await asyncio.sleep(0)
    return value


def names(server: int) -> str:
    return f"server {server}"


async def test_a_silent_server_is_cut_off_once_another_part_ended() -> None:
    cuts: list[int] = []
    results = await gather_servers(
        {0: soon("a"), 1: never(), 2: soon("c")},
        STALL_S,
        lambda _server, started: started,
        names,
        lambda server, _since: cuts.append(server),
    )
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], ServerStalled) and "server 1" in str(results[1])
    assert cuts == [1]


async def test_a_server_that_keeps_answering_is_not_cut_off() -> None:
    loop = asyncio.get_running_loop()

    async def slow() -> str:
        for _ in range(6):  # longer than the bound in all, answering all along
            await asyncio.sleep(STALL_S / 2)
        return "b"

    results = await gather_servers(
        {0: soon("a"), 1: slow()}, STALL_S, lambda _server, _started: loop.time(), names
    )
    assert results == ["a", "b"]


async def test_errors_are_results_and_a_lone_part_is_never_cut() -> None:
    async def fails() -> str:
        raise ValueError("refused")

    results = await gather_servers(
        {0: fails(), 1: soon("b")}, STALL_S, lambda _server, started: started, names
    )
    assert isinstance(results[0], ValueError) and results[1] == "b"
    waited = asyncio.ensure_future(
        gather_servers({0: asyncio.sleep(STALL_S * 4, "late")}, STALL_S, lambda s, t: t, names)
    )
    assert await waited == ["late"]
