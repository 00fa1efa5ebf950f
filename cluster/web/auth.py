"""Bearer tokens and roles (the web_tokens setting: "TOKEN=ROLE,TOKEN=ROLE").

A token is a shared secret the operator makes (`openssl rand -hex 32`); each has one
role, and each route needs one permission.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from enum import StrEnum
from typing import Any

from aiohttp import web

from cluster.errors import ConfigError

# Shorter tokens can be guessed; 32 random hex digits are 128 bits.
TOKEN_MIN_CHARS = 16


class Role(StrEnum):
    PRODUCER = "producer"  # schedule, cancel, reschedule, get; recurring schedules
    OPERATOR = "operator"  # everything: also search, bulk cancel, dead letters, the cluster
    VIEWER = "viewer"  # read only, payloads hidden: jobs, search, dead letters, the cluster


class Permission(StrEnum):
    WRITE_JOBS = "jobs:write"  # schedule, cancel, reschedule; put and remove schedules
    READ_JOBS = "jobs:read"  # a job by its id, recurring schedules
    SEARCH_JOBS = "jobs:search"  # search every job, pending counts per topic
    BULK_JOBS = "jobs:bulk"  # cancel every job a filter matches
    READ_PAYLOADS = "payloads:read"  # payloads in the answers (hidden from the others)
    READ_DEAD = "dead:read"
    WRITE_DEAD = "dead:write"  # replay, purge
    READ_CLUSTER = "cluster:read"


GRANTS: dict[Role, frozenset[Permission]] = {
    # A producer acts on jobs whose ids it knows (its own), never on every job.
    Role.PRODUCER: frozenset(
        {Permission.WRITE_JOBS, Permission.READ_JOBS, Permission.READ_PAYLOADS}
    ),
    Role.OPERATOR: frozenset(Permission),
    Role.VIEWER: frozenset(
        {
            Permission.READ_JOBS,
            Permission.SEARCH_JOBS,
            Permission.READ_DEAD,
            Permission.READ_CLUSTER,
        }
    ),
}
# Where the authenticating middleware leaves the request's role (None: no tokens set,
# every request has operator rights).
ROLE_KEY = web.RequestKey("delayq.role", Role)


def may_read_payloads(role: Role | None) -> bool:
    return role is None or Permission.READ_PAYLOADS in GRANTS[role]


def without_payload(answer: dict[str, Any]) -> dict[str, Any]:
    """A job's answer for a role that may not read payloads: payload null, said so."""
    if "payload" in answer:
        answer["payload"] = None
    if isinstance(answer.get("record"), dict):  # a dead letter's record
        answer["record"] = {k: v for k, v in answer["record"].items() if k != "payload"}
    answer["payload_hidden"] = True
    return answer


def parse_tokens(text: str) -> dict[str, Role]:
    """The web_tokens setting as {token: role}; ConfigError names what is wrong (never
    the token itself, which is a secret)."""
    tokens: dict[str, Role] = {}
    for index, part in enumerate(text.split(","), start=1):
        part = part.strip()
        if not part:
            continue
        token, equals, role = part.rpartition("=")
        token, role = token.strip(), role.strip()
        if not equals or not token:
            raise ConfigError(f"web_tokens: entry {index} is not TOKEN=ROLE")
        if role not in Role.__members__.values():
            # Never the text itself: written as ROLE=TOKEN, it is the token.
            roles = ", ".join(Role)
            swapped = " (it looks like ROLE=TOKEN)" if token in Role.__members__.values() else ""
            raise ConfigError(
                f"web_tokens: entry {index} does not end in one of the roles {roles}: "
                f"write TOKEN=ROLE{swapped}"
            )
        if len(token) < TOKEN_MIN_CHARS:
            raise ConfigError(
                f"web_tokens: the token of entry {index} is shorter than {TOKEN_MIN_CHARS} "
                "characters (make one with `openssl rand -hex 32`)"
            )
        if any(char.isspace() or not char.isprintable() for char in token):
            raise ConfigError(f"web_tokens: the token of entry {index} has a space or control")
        if token in tokens:
            raise ConfigError(f"web_tokens: entry {index} repeats an earlier token")
        tokens[token] = Role(role)
    return tokens


class Tokens:
    """Finds the role of a request's bearer token, comparing in constant time."""

    def __init__(self, tokens: dict[str, Role]) -> None:
        self._tokens = [(token.encode(), role) for token, role in tokens.items()]

    @property
    def required(self) -> bool:
        return bool(self._tokens)

    def role_of(self, authorization: str | None) -> Role | None:
        """The role of an "Authorization: Bearer TOKEN" header, or None if it names no
        known token (or there is none)."""
        if not authorization:
            return None
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        presented = given.strip().encode(errors="replace")
        found: Role | None = None
        for token, role in self._tokens:  # every token compared: no early exit to time
            if hmac.compare_digest(token, presented):
                found = role
        return found


def is_loopback(host: str) -> bool:
    """Whether every address host names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses
    )


def shown_to(request: web.Request, answer: dict[str, Any]) -> dict[str, Any]:
    """A job's answer as the request's role may see it (payloads: READ_PAYLOADS)."""
    return answer if may_read_payloads(request.get(ROLE_KEY)) else without_payload(answer)
