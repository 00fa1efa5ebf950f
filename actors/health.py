"""Is this node healthy (alive and making progress) and ready (doing its share)?

    live = liveness(parts, settings)     # /healthz: 503 when an actor is stuck
    ready = readiness(parts, settings)   # /readyz: 503 when it cannot do its share now

Liveness is about the process: every actor runs and none has been busy with one step
for longer than stall_timeout_s (an actor waiting for work is idle, not stuck; see
actors/lifecycle.py). A failing liveness probe means "restart me".

Readiness is about the cluster: the node is a member (not withdrawn for want of Redis
or Kafka, actors/withdrawal.py) with a live ZooKeeper session, holds every slot the slot
map gives it, and Redis, MySQL and Kafka answered within ready_timeout_s
(actors/sampler.py checks them every stats_interval_ms). A node that is not ready keeps
running and recovers by itself; it must not be restarted for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.lifecycle import Actor
from cluster.settings.config import Settings

if TYPE_CHECKING:
    from actors.node import NodeParts


@dataclass(frozen=True)
class Verdict:
    ok: bool
    problems: list[str]
    details: dict[str, object] = field(default_factory=dict)

    def as_dict(self, passing: str, failing: str) -> dict[str, object]:
        return {
            "status": passing if self.ok else failing,
            "problems": self.problems,
            **self.details,
        }


def busy_s(parts: NodeParts) -> dict[str, float]:
    """Actor → how long it has been busy with its current step (0: waiting for work)."""
    return {
        actor.name: actor.busy_for_s()
        for actor in parts.supervisor.actors
        if isinstance(actor, Actor)
    }


def liveness(parts: NodeParts, settings: Settings) -> Verdict:
    problems = []
    busy = busy_s(parts)
    for actor in parts.supervisor.actors:
        if not parts.supervisor.running(actor.name):
            problems.append(f"{actor.name} is not running")
    for name, seconds in busy.items():
        if seconds > settings.stall_timeout_s:
            problems.append(
                f"{name} has been busy with one step for {seconds:.0f} s "
                f"(stall_timeout_s = {settings.stall_timeout_s:g})"
            )
    return Verdict(not problems, problems, {"busy_s": {k: round(v, 3) for k, v in busy.items()}})


def readiness(parts: NodeParts, settings: Settings) -> Verdict:
    problems = []
    membership = parts.membership
    withdrawn = membership.withdrawal.reason
    if withdrawn is not None:
        problems.append(f"withdrawn from the cluster, its slots given to the others: {withdrawn}")
    elif membership.member is None:
        problems.append("not a member of the cluster (joining or rejoining)")
    else:
        state = membership.session_state()
        if state != "connected":
            problems.append(f"ZooKeeper session is {state}")
        missing = membership.assigned - parts.held.owned()
        if missing:
            problems.append(
                f"holds {len(membership.assigned) - len(missing)} of the "
                f"{len(membership.assigned)} slots assigned to it (hand-off in progress)"
            )
    ages = parts.sampler.store_ages_s()
    for store, age in ages.items():
        if age is None:
            problems.append(f"{store} has not answered since the node started")
        elif age > settings.ready_timeout_s:
            problems.append(
                f"{store} last answered {age:.0f} s ago (ready_timeout_s = "
                f"{settings.ready_timeout_s:g})"
            )
    details: dict[str, object] = {
        "member": membership.member,
        "slots_assigned": len(membership.assigned),
        "slots_held": len(parts.held.owned()),
        "stores_last_ok_s": {k: None if v is None else round(v, 3) for k, v in ages.items()},
    }
    return Verdict(not problems, problems, details)
