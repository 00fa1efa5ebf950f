"""A test that stops a service of the shared stack must be marked `alone`: make test runs
the others side by side, and they would fail beside it (tests/faults/shared.py)."""

from __future__ import annotations

import pytest

from tests.conftest import must_run_alone


def test_a_test_not_marked_alone_is_failed() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"mark it @pytest\.mark\.alone"):
        must_run_alone("stops the shared stack's redis")


@pytest.mark.alone
def test_a_test_marked_alone_goes_on() -> None:
    must_run_alone("stops the shared stack's redis")
