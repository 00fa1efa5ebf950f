"""The Kafka ACLs of docs/security.md (Kafka ACLs), as data: the secure local stack
applies exactly these, and a unit test (tests/unit/test_security_recipes.py) holds the
page's ``kafka-acls.sh`` lines and this list together.

- ``DOCUMENTED``: who may do what, with the page's names (the users ``delayq-node``,
  ``delayq-ingress`` and ``delayq-producer``, ingress topic ``delayq.jobs``, fired topics
  ``orders.*``, key prefix ``dq``);
- ``STACK_EXTRA``: what the secure stack adds for its tests: the nodes may also write
  the tests' topics (``test.*``), which the tests' admin user creates;
- ``apply``: creates them on a running broker (CreateAcls, as the stack's admin user).

Everything else is denied: the brokers run StandardAuthorizer with
``allow.everyone.if.no.acl.found=false`` (the default), and only the brokers' own user
and the admin user are super users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.devstack.service import ServicesError, quiet, run_coroutine

NODE_USER = "delayq-node"
INGRESS_USER = "delayq-ingress"
PRODUCER_USER = "delayq-producer"

# Kafka's protocol codes (org.apache.kafka.common.acl / resource).
_RESOURCE_TYPES = {"topic": 2, "group": 3, "transactional-id": 5}
_OPERATIONS = {"Read": 3, "Write": 4, "Create": 5, "Describe": 8}
_LITERAL, _PREFIXED = 3, 4
_ALLOW = 3
_ANY_HOST = "*"


@dataclass(frozen=True)
class Acl:
    """One ``kafka-acls.sh --add`` line: a user allowed operations on one resource."""

    user: str
    operations: tuple[str, ...]
    resource: str  # "topic", "group" or "transactional-id"
    name: str
    prefixed: bool = False

    def __post_init__(self) -> None:
        unknown = [op for op in self.operations if op not in _OPERATIONS]
        if self.resource not in _RESOURCE_TYPES or unknown or not self.operations:
            raise ValueError(f"not a Kafka ACL this stack knows: {self}")

    def command(self) -> str:
        """The page's form: ``$ACL --allow-principal User:… --operation … --topic …``."""
        words = ["$ACL", "--allow-principal", f"User:{self.user}"]
        for operation in self.operations:
            words += ["--operation", operation]
        if self.prefixed:
            words += ["--resource-pattern-type", "prefixed"]
        return " ".join([*words, f"--{self.resource}", self.name])


@dataclass(frozen=True)
class AclNames:
    """The names an ACL list is written for."""

    ingress_topic: str = "delayq.jobs"
    ingress_group: str = "delayq-ingress"
    fired_topics_prefix: str = "orders."
    journal_topic: str = "delayq-journal"
    key_prefix: str = "dq"


def documented(names: AclNames = AclNames()) -> list[Acl]:
    """docs/security.md's ACLs, in the page's order."""
    return [
        # A service that schedules through the ingress: write ingress_topic, nothing else.
        Acl(PRODUCER_USER, ("Write", "Describe"), "topic", names.ingress_topic),
        # The ingress: read ingress_topic in its consumer group, write the error topic.
        Acl(INGRESS_USER, ("Read", "Describe"), "topic", names.ingress_topic),
        Acl(INGRESS_USER, ("Read",), "group", names.ingress_group),
        Acl(INGRESS_USER, ("Write", "Describe"), "topic", f"{names.ingress_topic}.errors"),
        # The nodes: write the topics jobs fire to, no other topic, and create none.
        Acl(NODE_USER, ("Write", "Describe"), "topic", names.fired_topics_prefix, prefixed=True),
        # delivery = exactly_once also: the journal and the slots' transactional ids.
        Acl(NODE_USER, ("Create", "Write", "Read", "Describe"), "topic", names.journal_topic),
        Acl(
            NODE_USER,
            ("Write", "Describe"),
            "transactional-id",
            f"delayq.{names.key_prefix}.slot-",
            prefixed=True,
        ),
    ]


# The secure stack's tests fire jobs to topics named test.<random>.
STACK_EXTRA = (Acl(NODE_USER, ("Write", "Describe"), "topic", "test.", prefixed=True),)


def stack_acls() -> list[Acl]:
    """What the secure stack applies: the page's list, and the tests' topics."""
    return [*documented(), *STACK_EXTRA]


def _creations(acl: Acl) -> list[tuple[int, str, int, str, str, int, int]]:
    pattern = _PREFIXED if acl.prefixed else _LITERAL
    return [
        (
            _RESOURCE_TYPES[acl.resource],
            acl.name,
            pattern,
            f"User:{acl.user}",
            _ANY_HOST,
            _OPERATIONS[operation],
            _ALLOW,
        )
        for operation in acl.operations
    ]


def apply(address: str, options: dict[str, Any], acls: list[Acl]) -> None:
    """Create `acls` on the broker at `address` (idempotent: an ACL that exists already
    is accepted as is). `options`: aiokafka's security keyword arguments of a user
    allowed to change ACLs."""

    async def create() -> list[str]:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.protocol.admin import CreateAclsRequest

        client = AIOKafkaAdminClient(bootstrap_servers=address, request_timeout_ms=10000, **options)
        errors: list[str] = []
        try:
            await client.start()
            node = client._client.get_random_node()
            for acl in acls:
                for creation in _creations(acl):  # one binding a request
                    response = await client._client.send(node, CreateAclsRequest(*creation))
                    for code, message in response.creation_responses:
                        if code != 0:
                            errors.append(f"{acl.command()}: Kafka error {code} {message}")
        finally:
            await client.close()
        return errors

    with quiet("aiokafka"):
        errors = run_coroutine(create(), timeout=60.0)
    if errors:
        raise ServicesError("Kafka refused the stack's ACLs:\n" + "\n".join(errors))
