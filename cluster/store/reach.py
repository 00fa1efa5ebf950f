"""MySQL that does not answer at open, said in one line: StoreUnavailable naming every
server's host:port (never the password) and the next step (cluster/connections/reach.py
says the same of Redis)."""

from __future__ import annotations

import pymysql
from pymysql.constants import CR

from cluster.connections.reach import next_step
from cluster.errors import StoreUnavailable
from cluster.settings.config import Settings
from cluster.store.servers import server_specs

# The client-side codes of "no server answered there": refused, no such socket or host,
# gone away, lost during the handshake.
_NO_ANSWER = {
    CR.CR_CONNECTION_ERROR,
    CR.CR_CONN_HOST_ERROR,
    CR.CR_UNKNOWN_HOST,
    CR.CR_SERVER_GONE_ERROR,
    CR.CR_SERVER_LOST,
}


def mysql_unreachable(error: BaseException) -> bool:
    """Whether error says no MySQL server answered (as opposed to a refusal or a bad
    statement, which keep their own errors)."""
    if isinstance(error, pymysql.err.OperationalError):
        return bool(error.args) and error.args[0] in _NO_ANSWER
    return isinstance(error, (OSError, TimeoutError, pymysql.err.InterfaceError))


def mysql_unavailable(settings: Settings, error: BaseException) -> StoreUnavailable:
    """The StoreUnavailable to raise when no MySQL server answered at open."""
    names = ", ".join(spec.name for spec in server_specs(settings))
    cause = str(error.args[1]) if isinstance(error, pymysql.err.OperationalError) else ""
    cause = cause or str(error) or type(error).__name__
    return StoreUnavailable(
        f"MySQL at {names} does not answer ({cause[:200]}): {next_step('MySQL')}"
    )
