"""ZooKeeper connections from Settings: the one place that opens a ZKClient, logs in with
digest authentication and says which ACL delayq's znodes get.

With zk_auth = "user:password" the client sends the digest credentials on every
connection it makes (ZooKeeper keeps them per connection, so a reconnect must send them
again), and every znode it creates gets an ACL giving all permissions to that digest
identity and none to anyone else. Without zk_auth znodes are world-writable
(OPEN_ACL_UNSAFE): fit for trusted networks only (docs/security.md).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from typing import Any

from aiozk import ZKClient, protocol
from aiozk.protocol.acl import ACL
from aiozk.session import Session
from aiozk.states import States

from cluster.errors import ZooKeeperAccessError
from cluster.settings.config import Settings

log = logging.getLogger(__name__)

PERMS_ALL = ("read", "write", "create", "delete", "admin")


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


class _DigestSession(Session):  # type: ignore[misc]  # aiozk has no type hints
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


def is_open_acl(acl: list[Any]) -> bool:
    """Whether an ACL lets anyone write (world:anyone with the write permission)."""
    return any(entry.id.scheme == "world" and entry.perms & ACL.WRITE_PERM for entry in acl)
