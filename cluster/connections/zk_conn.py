"""ZooKeeper connections from Settings: the one place that opens a ZKClient, logs in with
digest authentication and says which ACL delayq's znodes get.

With zk_auth = "user:password" the client sends the digest credentials on every
connection it makes (ZooKeeper keeps them per connection, so a reconnect must send them
again), and every znode it creates gets an ACL giving all permissions to that digest
identity and none to anyone else. A znode someone else made (or opened) is not trusted:
check_acl() refuses one that lets any other identity write, create, delete or change
its ACL. Without zk_auth znodes are world-writable (OPEN_ACL_UNSAFE) and nothing is
checked: fit for trusted networks only (docs/security.md).

Its sessions move to another server of the ensemble as soon as theirs closes the
connection, and while no server answers they try them all again within a quarter of
the session timeout (_Session; docs/cluster.md#a-zookeeper-ensemble).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import random
from typing import Any

from aiozk import RetryPolicy, ZKClient, exc, protocol
from aiozk.connection import Connection
from aiozk.protocol.acl import ACL
from aiozk.protocol.stat import Stat
from aiozk.session import Session
from aiozk.states import States

from cluster.errors import ZooKeeperAccessError
from cluster.settings.config import Settings
from cluster.settings.logs import ZOOKEEPER

log = logging.getLogger(__name__)

PERMS_ALL = ("read", "write", "create", "delete", "admin")
ACL_CHECKS_AT_ONCE = 128  # getACL requests in flight at once


def digest_id(auth: str) -> str:
    """ZooKeeper's digest identity of "user:password": user:base64(sha1(user:password)),
    as its DigestAuthenticationProvider computes it (the user ends at the first ':')."""
    user = auth.split(":", 1)[0]
    hashed = base64.b64encode(hashlib.sha1(auth.encode()).digest()).decode()
    return f"{user}:{hashed}"


def zk_user(settings: Settings) -> str | None:
    return settings.zk_auth.split(":", 1)[0] if settings.zk_auth else None


def znode_acl(settings: Settings) -> list[Any]:
    """The ACL of every znode delayq creates: all permissions for the zk_auth identity
    and nothing for the world; without zk_auth, everything for anyone."""
    if not settings.zk_auth:
        return [protocol.UNRESTRICTED_ACCESS]
    return [ACL.make("digest", digest_id(settings.zk_auth), **dict.fromkeys(PERMS_ALL, True))]


# The first wait between two rounds of tries over the servers, doubled each round up to a
# quarter of the session timeout (_Session).
FIND_WAIT_S = 0.25


def find_waits(timeout_s: float) -> RetryPolicy:
    """How long a session waits before each new round of tries over the servers when no
    server answered the last one: FIND_WAIT_S, doubling, at most a quarter of the session
    timeout. aiozk's own waits 4, 8, 16, 32 and then 60 s, so after an outage (every
    server down, or no quorum) a node came back up to a minute after ZooKeeper did,
    although a round costs one connection per server."""
    cap = max(FIND_WAIT_S, timeout_s / 4)

    def wait(timings: list[float]) -> float:
        return min(cap, FIND_WAIT_S * 2.0 ** (len(timings) - 2))

    return RetryPolicy(try_limit=None, sleep_func=wait)


class _Connection(Connection):  # type: ignore[misc]  # aiozk has no type hints
    """aiozk's connection, which calls `ended(self)` when its read loop ends."""

    ended: Any = None

    def start_read_loop(self) -> None:
        super().start_read_loop()
        self.read_loop_task.add_done_callback(lambda _: self.ended(self))


class _Session(Session):  # type: ignore[misc]  # aiozk has no type hints
    """An aiozk session that notices at once when the server closes its connection, and
    whose rounds of tries over the servers are at most a quarter of the session timeout
    apart (find_waits()).

    aiozk's read loop just ends when the server closes the connection (as a ZooKeeper
    server does when it loses its leader or quorum, or stops): nothing failed the
    requests waiting for an answer or told the session, so it noticed only when its next
    ping went unanswered, up to a whole session timeout later. By then a node has given
    up its slots (at three quarters of it, actors/membership.py), although its session
    would have lived on on another server."""

    conn: Any  # aiozk's Connection, or None before the first

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._side_tasks: set[asyncio.Task[None]] = set()  # tasks on the side, kept alive

    async def make_connection(self, host: str, port: int) -> Any:
        # aiozk's make_connection, with a _Connection.
        conn = _Connection(
            host, port, watch_handler=self.event_dispatch, read_timeout=self.read_timeout
        )
        conn.ended = self._connection_ended
        try:
            await conn.connect()
        except Exception as error:
            log.debug("ZooKeeper: could not connect to %s:%s: %r", host, port, error)
            return None
        return conn

    def _connection_ended(self, conn: Any) -> None:
        """The server closed the session's connection: fail what waits on it, and look
        for a server now."""
        if conn is not self.conn or conn.closing or self.closing:
            return  # closed by this side, or already replaced
        log.info("ZooKeeper: %s:%s closed the connection", conn.host, conn.port)
        conn.abort()
        if self.state.current_state == States.CONNECTED:
            self.state.transition_to(States.SUSPENDED)

    async def find_server(self, allow_read_only: bool) -> None:
        # aiozk's find_server, with find_waits() instead of its backoff to a minute.
        policy = find_waits(self.timeout)
        conn: Any = None
        while conn is None:
            await policy.enforce()
            for host, port in random.sample(self.hosts, len(self.hosts)):
                conn = await self.make_connection(host, port)
                if conn is not None and conn.start_read_only and not allow_read_only:
                    self._close_later(conn)
                    conn = None
                if conn is not None:
                    log.debug("ZooKeeper: connected to %s:%s", host, port)
                    # The end of an outage, if one is under way (cluster/settings/logs.py).
                    ZOOKEEPER.answered(f"connected to {host}:{port}")
                    break
            if conn is None:
                ZOOKEEPER.failed(f"no server of {len(self.hosts)} answered")
        old, self.conn = self.conn, conn
        if old is not None:
            self._close_later(old)

    async def set_existing_watches(self) -> None:
        """aiozk's, sent beside the repair loop rather than inside it. aiozk awaits it in
        its repair loop: when the connection broke before the answer came, the request
        waited for the session to be repaired, which only that loop does, and the session
        hung for good. Sent aside, the loop repairs again and the next connection sends
        the watches anew (twice is harmless: ZooKeeper keeps one watch per path)."""
        task = asyncio.create_task(self._send_watches())
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _send_watches(self) -> None:
        try:
            await Session.set_existing_watches(self)
        except Exception as error:  # the connection broke: the repair loop sends them again
            log.debug("ZooKeeper: watches not set again (%r)", error)

    async def close(self) -> None:
        for task in list(self._side_tasks):
            task.cancel()  # watches waiting for a repair that will not come
        await super().close()

    def _close_later(self, conn: Any) -> None:
        task = asyncio.create_task(conn.close(self.timeout))
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)


class _DigestSession(_Session):
    """An aiozk session that authenticates each connection before anything else is sent
    on it: aiozk calls set_existing_watches right after every (re)connect, and the auth
    request goes out before it yields, so no request can overtake it."""

    credentials: bytes = b""

    async def set_existing_watches(self) -> None:
        reply = self.conn.send(protocol.AuthRequest(type=0, scheme="digest", auth=self.credentials))
        try:
            await reply  # digest auth always succeeds; a wrong password shows as NoAuth
        except Exception as error:  # the connection broke: let the repair loop retry
            log.warning(
                "ZooKeeper authentication not sent (%s); reconnecting", type(error).__name__
            )
            if self.state.current_state == States.CONNECTED:
                self.state.transition_to(States.SUSPENDED)
            return
        await super().set_existing_watches()


def make_zk(settings: Settings) -> ZKClient:
    """A ZKClient for the settings (not started): it authenticates with zk_auth on every
    connection and creates znodes with znode_acl(settings) unless told otherwise."""
    timeout_s = settings.zk_session_timeout_ms / 1000
    zk = ZKClient(settings.zk_hosts, session_timeout=timeout_s, default_acl=znode_acl(settings))
    if settings.zk_auth:
        session = _DigestSession(settings.zk_hosts, timeout_s, None, False, None)
        session.credentials = settings.zk_auth.encode()
    else:
        session = _Session(settings.zk_hosts, timeout_s, None, False, None)
    zk.session = session
    return zk


async def open_zk(settings: Settings, timeout_s: float | None = None) -> ZKClient:
    """make_zk(settings), started (connected and authenticated). timeout_s bounds the
    connect (default: three session timeouts); the client is closed if it fails."""
    zk = make_zk(settings)
    limit = timeout_s if timeout_s is not None else settings.zk_session_timeout_ms / 1000 * 3
    try:
        await asyncio.wait_for(zk.start(), limit)
    except BaseException:
        await _close_quietly(zk)
        raise
    return zk


async def _close_quietly(zk: ZKClient) -> None:
    try:
        await asyncio.wait_for(zk.close(), 5)
    except Exception:  # closing a client that may never have connected
        pass


def no_auth_error(settings: Settings, path: str) -> ZooKeeperAccessError:
    """The error for a NoAuth on `path`: one line naming ZooKeeper and what to check."""
    if settings.zk_auth:
        hint = (
            f"zk_auth (user {zk_user(settings)!r}) is not allowed there: wrong password, or "
            "the cluster was created with other credentials"
        )
    else:
        hint = "the cluster's znodes are protected by an ACL: set zk_auth to its credentials"
    return ZooKeeperAccessError(
        f"ZooKeeper at {settings.zk_hosts} refused access to {path} (NoAuth): {hint}"
    )


# The rights that let a client change a znode or its children: only delayq's own identity
# may hold them on the cluster's znodes. Others may read (monitoring).
CHANGE_PERMS = ACL.WRITE_PERM | ACL.CREATE_PERM | ACL.DELETE_PERM | ACL.ADMIN_PERM
# What delayq itself needs on them (admin only to let an operator run setAcl as delayq).
NEEDED_PERMS = ACL.READ_PERM | ACL.WRITE_PERM | ACL.CREATE_PERM | ACL.DELETE_PERM
_PERM_LETTERS = (
    (ACL.CREATE_PERM, "c"),
    (ACL.DELETE_PERM, "d"),
    (ACL.READ_PERM, "r"),
    (ACL.WRITE_PERM, "w"),
    (ACL.ADMIN_PERM, "a"),
)


def _letters(perms: int) -> str:
    return "".join(letter for bit, letter in _PERM_LETTERS if perms & bit)


def acl_problem(settings: Settings, acl: list[Any]) -> str | None:
    """What makes a znode's ACL unsafe for a cluster with zk_auth, or None if it is safe:
    every right to change the znode (write, create, delete, admin) must belong to the
    zk_auth digest identity alone, and that identity must be able to read, write, create
    and delete. Without zk_auth nothing is checked (an open cluster, docs/security.md)."""
    if not settings.zk_auth:
        return None
    me = ("digest", digest_id(settings.zk_auth))
    others = [
        f"{entry.id.scheme}:{entry.id.id}:{_letters(entry.perms)}"
        for entry in acl
        if (entry.id.scheme, entry.id.id) != me and entry.perms & CHANGE_PERMS
    ]
    if others:
        return f"others may change it ({', '.join(others)})"
    mine = 0
    for entry in acl:
        if (entry.id.scheme, entry.id.id) == me:
            mine |= entry.perms
    if mine & NEEDED_PERMS != NEEDED_PERMS:
        return f"digest user {zk_user(settings)!r} has only {_letters(mine) or 'no rights'}"
    return None


def unsafe_acl_error(settings: Settings, path: str, problem: str) -> ZooKeeperAccessError:
    """The error for a znode delayq relies on whose ACL is not its own: one line naming
    the znode, what is wrong and the fix (never the password)."""
    user = zk_user(settings)
    return ZooKeeperAccessError(
        f"ZooKeeper znode {path} has an unsafe ACL: {problem}. With zk_auth every znode "
        f"of cluster {settings.zk_cluster_root} must give the rights to change it to "
        f"digest user {user!r} alone; someone else created or changed it. Find out who, "
        f"then delete the cluster's znodes or, in zkCli.sh, run `addauth digest "
        f"{user}:PASSWORD` and `setAcl -R {settings.zk_cluster_root} "
        f"auth:{user}:PASSWORD:cdrwa` (docs/security.md#zookeeper-digest-authentication-and-acls)"
    )


async def read_acl(zk: ZKClient, settings: Settings, path: str) -> tuple[list[Any], Stat]:
    """A znode's ACL and stat (its created_zxid tells one incarnation of a path from the
    next). Raises aiozk's NoNode if it is missing, ZooKeeperAccessError on NoAuth."""
    try:
        reply = await zk.send(protocol.GetACLRequest(path=zk.normalize_path(path)))
    except exc.NoAuth:
        raise no_auth_error(settings, path) from None
    return reply.acl, reply.stat


async def check_acl(zk: ZKClient, settings: Settings, path: str) -> Stat:
    """read_acl(), raising unsafe_acl_error() when the ACL is not delayq's own."""
    acl, stat = await read_acl(zk, settings, path)
    problem = acl_problem(settings, acl)
    if problem is not None:
        raise unsafe_acl_error(settings, path, problem)
    return stat


async def check_acls(zk: ZKClient, settings: Settings, paths: list[str]) -> None:
    """check_acl() on each of `paths` (a few at a time), raising the error of the first
    in order that fails; missing znodes pass (they are checked once made). Nothing is
    checked without zk_auth."""
    if not settings.zk_auth:
        return
    for at in range(0, len(paths), ACL_CHECKS_AT_ONCE):
        chunk = paths[at : at + ACL_CHECKS_AT_ONCE]
        results = await asyncio.gather(
            *(check_acl(zk, settings, path) for path in chunk), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, exc.NoNode):
                raise result
