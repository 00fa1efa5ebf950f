"""The shared stack's services, for the tests that stop one: such a test must be marked
`alone` (make test runs it while no other test runs on the shared stack), and
shared_pid fails it otherwise."""

from __future__ import annotations

from cluster.devstack import stack
from tests.conftest import must_run_alone


def shared_pid(service: str) -> int:
    """The pid of a running service of the shared stack (redis, mysql, kafka, redis-c1,
    …), for the running test to stop, freeze or kill it."""
    must_run_alone(f"stops the shared stack's {service}")
    pid = stack.service_pid(service)
    assert pid is not None, f"{service} is not running"
    return pid
