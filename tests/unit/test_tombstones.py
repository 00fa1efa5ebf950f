"""Where the tombstones actor (actors/tombstones.py) starts its next read of a slot:
past every tombstone it is done with, never past one still to do."""

from __future__ import annotations

from typing import Any

from actors import tombstones
from actors.ownership import StaticOwnership
from actors.tombstones import Tombstones
from cluster.settings.config import Settings


def actor() -> Tombstones:
    none: Any = None
    return Tombstones(Settings(), none, none, StaticOwnership(1), lambda: 0.0)


def test_the_cursor_moves_past_what_is_done() -> None:
    t = actor()
    t._advance({0: [("a", 10), ("b", 20), ("c", 30)]}, {})
    assert t._cursor == {0: 30}
    t._advance({0: []}, {})
    assert t._cursor == {0: 30}  # nothing read: it stays


def test_the_cursor_stops_below_one_still_to_do() -> None:
    t = actor()
    t._advance({0: [("a", 10), ("b", 20), ("c", 30)]}, {0: {"b"}})
    assert t._cursor == {0: 10}
    t = actor()
    t._advance({0: [("a", 10), ("b", 10), ("c", 30)]}, {0: {"b"}})
    assert t._cursor == {0: 9}  # "b" shares "a"'s score: the next read includes it
    t = actor()
    t._advance({0: [("a", 10)]}, {0: {"a"}})
    assert t._cursor == {}  # from the start again


def test_a_full_page_is_read_again_from_its_last_score(monkeypatch: Any) -> None:
    monkeypatch.setattr(tombstones, "PAGE", 3)
    t = actor()
    t._advance({0: [("a", 10), ("b", 20), ("c", 20)]}, {})
    assert t._cursor == {0: 19}  # more may share 20 beyond the page
