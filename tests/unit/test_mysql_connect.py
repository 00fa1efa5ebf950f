"""cluster/store/connect.py reuses aiomysql's pool with one method replaced (so that
every new connection checks TLS in its handshake): that copy must follow aiomysql."""

from __future__ import annotations

import hashlib
import inspect

import aiomysql

from cluster.store import connect

# sha256 of aiomysql 0.3.2's Pool._fill_free_pool, which connect._Pool copies.
COPIED_FROM = "c31f924b5d9f4aa7a21a8d4195be35c910cfeaead1d1f4fdb40982e810e62566"


def test_the_copied_pool_method_is_aiomysqls() -> None:
    source = inspect.getsource(aiomysql.Pool._fill_free_pool)
    assert hashlib.sha256(source.encode()).hexdigest() == COPIED_FROM, (
        "aiomysql changed Pool._fill_free_pool: bring connect._Pool._fill_free_pool "
        "in line with it, then update COPIED_FROM"
    )


def test_the_handshake_hook_exists() -> None:
    """_Connection overrides the method that sends the login, right after the greeting."""
    assert inspect.iscoroutinefunction(aiomysql.Connection._request_authentication)
    assert "_request_authentication" in vars(connect._Connection)
    assert issubclass(connect._Pool, aiomysql.Pool)
