"""docs/security.md's recipes are what the secure local stack applies: its Kafka ACLs
(cluster/devstack/kafka_acls.py) and its MySQL grants (cluster/devstack/mysql_grants.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster.devstack import kafka_acls, mysql_grants

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def section(title: str) -> str:
    text = DOCS.read_text()
    start = text.index(f"\n{title}\n")
    ends = [text.find(f"\n{h} ", start + len(title) + 2) for h in ("##", "###")]
    return text[start : min([end for end in ends if end > 0] or [len(text)])]


def code_block(text: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", text, re.DOTALL)
    assert found, f"no ```{language} block"
    return found.group(1)


def documented_acl_lines() -> list[str]:
    """The ``$ACL …`` lines of the Kafka ACLs recipe, continuations joined."""
    block = code_block(section("### Kafka ACLs"), "sh").replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in block.splitlines()]
    return [line for line in lines if line.startswith("$ACL ")]


def test_the_documented_kafka_acls_are_the_stacks() -> None:
    assert documented_acl_lines() == [acl.command() for acl in kafka_acls.documented()]


def test_the_stack_applies_the_documented_acls_and_only_adds_its_test_topics() -> None:
    applied = kafka_acls.stack_acls()
    assert applied[: len(kafka_acls.documented())] == kafka_acls.documented()
    extra = applied[len(kafka_acls.documented()) :]
    assert [(acl.user, acl.operations, acl.resource, acl.name) for acl in extra] == [
        (kafka_acls.NODE_USER, ("Write", "Describe"), "topic", "test.")
    ]
    assert " ".join(extra[0].command().split()) in " ".join(DOCS.read_text().split())


def test_only_the_nodes_may_touch_the_journal() -> None:
    journal = kafka_acls.AclNames().journal_topic
    users = {acl.user for acl in kafka_acls.stack_acls() if acl.name == journal}
    assert users == {kafka_acls.NODE_USER}


def test_an_unknown_operation_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Kafka ACL"):
        kafka_acls.Acl("someone", ("Alter",), "topic", "x")


def test_the_documented_mysql_grants_are_the_stacks() -> None:
    assert code_block(section("## MySQL grants"), "sql") == mysql_grants.DOCUMENTED


def test_the_stack_makes_every_documented_user() -> None:
    made = [s.split("'")[1] for s in mysql_grants.statements() if s.startswith("CREATE USER")]
    assert made == list(mysql_grants.USERS)
    accounts = mysql_grants.account_statements({user: f"pw-{user}" for user in made})
    assert sum(s.startswith("CREATE USER IF NOT EXISTS") for s in accounts) == len(made)
    assert "'…'" not in " ".join(accounts)
    assert "GRANT ALL PRIVILEGES ON `delayq\\_%`.* TO 'delayq_admin'@'%'" in accounts


def test_the_table_grants_repeat_for_each_table() -> None:
    granted = mysql_grants.table_statements("delayq_x", 2)
    assert "GRANT SELECT ON `delayq_x`.`delayq_shards` TO 'shop'@'%'" in granted
    for n in ("0000", "0001"):
        assert (
            f"GRANT SELECT, INSERT ON `delayq_x`.`job_history_{n}` TO 'delayq_producer'@'%'"
            in granted
        )
        assert f"GRANT SELECT (job_id), INSERT, UPDATE ON `delayq_x`.`job_{n}` TO 'shop'@'%'" in (
            granted
        )
    assert not [s for s in granted if "0002" in s or "`.*" in s or "`delayq`." in s]
