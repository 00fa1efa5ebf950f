"""Apache Kafka of the local stack: brokers in KRaft mode (each node both broker and
controller), run from the jars of ``org.apache.kafka:kafka_2.13`` that Maven fetches
once into the state folder. No Kafka download other than Maven Central, no Docker.

- ``fetch()``: ``mvn dependency:copy-dependencies`` of a small generated pom into
  ``$DELAYQ_STATE_DIR/kafka-dist/<version>/lib``, with strict checksum checks and a
  Maven repository of its own under ``kafka-dist/m2``; skipped once complete.
- ``prepare``: ``server.properties`` and a log4j2 config, and the first time the data
  folder is formatted (``kafka.tools.StorageTool format``) with the stack's cluster id,
  a static controller quorum of every node, and in the secure stack the SCRAM users
  (their passwords through a 0600 argument file, never on a command line).
- ``command``: ``java … kafka.Kafka server.properties``.
- ``probe``: a real Kafka request (bootstrap and metadata) that must list this node.

One broker by default (replication factor 1); ``--kafka-brokers 3`` runs three
(replication factor 3, ``min.insync.replicas`` 2). The secure stack's clients use
SASL_SSL with SCRAM-SHA-512 and the stack's CA, one user per role (``delayq-node``,
``delayq-ingress``, ``delayq-producer``, and ``admin`` for operators and tests); the
brokers talk to each other the same way (user ``kafka-broker``), and to the controllers
over TLS with the stack's certificate (mutual TLS, on the loopback address). It runs
StandardAuthorizer with the ACLs of cluster/devstack/kafka_acls.py, creates no topic on
its own (``auto.create.topics.enable=false``), and its ``server.properties``, which
holds the brokers' password, is 0600 in a 0700 folder.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.devstack import kafka_acls
from cluster.devstack.packages import require_program
from cluster.devstack.service import (
    HOST,
    Service,
    ServicesError,
    kafka_broker_ids,
    kafka_brokers_wanted,
    state_dir,
)

VERSION = "4.4.0"
LOG4J_VERSION = "2.25.5"  # the log4j2 that kafka-server 4.4.0 brings
DEPENDENCY_PLUGIN = "3.8.1"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
# The controller listener of a node is its client port + CONTROLLER_OFFSET.
CONTROLLER_OFFSET = 3
BROKER_USER = "kafka-broker"
ADMIN_USER = "admin"
# The secure stack's SCRAM users and the names of their passwords in secrets.json.
USERS = {
    BROKER_USER: "kafka_broker",
    ADMIN_USER: "kafka_admin",
    kafka_acls.NODE_USER: "kafka_node",
    kafka_acls.INGRESS_USER: "kafka_ingress",
    kafka_acls.PRODUCER_USER: "kafka_producer",
}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The principal of a TLS client certificate: the stack's own (brokers → controllers).
CERT_PRINCIPAL = "CN=localhost"
SCRAM = "SCRAM-SHA-512"
FETCH_TIMEOUT_S = 600.0
FORMAT_TIMEOUT_S = 120.0
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)

_POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `delayq services up`: the jars Apache Kafka {VERSION} runs on. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>delayq.devstack</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{VERSION}</version>
    </dependency>
    <!-- Kafka logs through slf4j 1.x: this binds it to log4j2, configured per broker. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
      <scope>runtime</scope>
    </dependency>
  </dependencies>
  <build>
    <pluginManagement>
      <plugins>
        <plugin>
          <groupId>org.apache.maven.plugins</groupId>
          <artifactId>maven-dependency-plugin</artifactId>
          <version>{DEPENDENCY_PLUGIN}</version>
        </plugin>
      </plugins>
    </pluginManagement>
  </build>
</project>
"""


def dist_dir() -> Path:
    """Where the jars of this version live (shared by the plain and secure stacks)."""
    return state_dir() / "kafka-dist" / VERSION


def lib_dir() -> Path:
    return dist_dir() / "lib"


def fetch() -> Path:
    """The folder of Kafka's jars, fetched with Maven the first time (checksums
    checked against Maven Central's); an error saying what failed otherwise."""
    done = dist_dir() / "complete"
    if done.exists():
        return lib_dir()
    mvn = require_program("mvn", "maven")
    dist_dir().mkdir(parents=True, exist_ok=True)
    (dist_dir() / "pom.xml").write_text(_POM)
    shutil.rmtree(lib_dir(), ignore_errors=True)
    print(f"fetching Apache Kafka {VERSION} with Maven into {dist_dir()}", flush=True)
    started = time.monotonic()
    command = [
        mvn,
        "-q",
        "-B",
        "--strict-checksums",
        f"-Dmaven.repo.local={dist_dir().parent / 'm2'}",
        "-f",
        str(dist_dir() / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={lib_dir()}",
        "-DincludeScope=runtime",
    ]
    try:
        ran = subprocess.run(
            command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ServicesError(f"Maven did not fetch Kafka within {FETCH_TIMEOUT_S:.0f} s") from None
    if ran.returncode != 0 or not any(lib_dir().glob(f"kafka_2.13-{VERSION}.jar")):
        tail = "\n".join((ran.stdout + ran.stderr).strip().splitlines()[-15:])
        raise ServicesError(f"Maven could not fetch Apache Kafka {VERSION}:\n{tail}")
    jars = list(lib_dir().glob("*.jar"))
    size_mb = sum(jar.stat().st_size for jar in jars) / 1e6
    print(
        f"fetched {len(jars)} jars ({size_mb:.0f} MB) in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    done.write_text(f"{VERSION}\n")
    return lib_dir()


def node_names(brokers: int) -> list[str]:
    return ["kafka", *(f"kafka-{n}" for n in range(2, brokers + 1))]


def controller_port(client_port: int) -> int:
    return client_port + CONTROLLER_OFFSET


def _cluster_id(root: Path) -> str:
    """The stack's Kafka cluster id, made once (base64 of a UUID, as Kafka's own)."""
    path = root / "kafka-cluster-id"
    if path.exists():
        return path.read_text().strip()
    while True:
        made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not made.startswith("-"):  # would read as an option
            break
    path.write_text(made + "\n")
    return made


def node_id(name: str) -> int:
    """kafka → 1, kafka-2 → 2, kafka-3 → 3."""
    return 1 if name == "kafka" else int(name.rsplit("-", 1)[1])


def _voters(ports: dict[str, int]) -> str:
    """The static controller quorum: every node, by its controller listener."""
    return ",".join(
        f"{node_id(name)}@{HOST}:{controller_port(port)}" for name, port in ports.items()
    )


def _properties(svc: Service, ports: dict[str, int]) -> list[str]:
    brokers = len(ports)
    replication = min(brokers, 3)
    min_isr = 2 if brokers >= 3 else 1
    secure = svc.secrets is not None
    listener = "SASL_SSL" if secure else "PLAINTEXT"
    controller = "SSL" if secure else "PLAINTEXT"
    lines = [
        "# Written by `delayq services up`; rewritten on every start.",
        "process.roles=broker,controller",
        f"node.id={node_id(svc.name)}",
        f"controller.quorum.voters={_voters(ports)}",
        f"listeners={listener}://{HOST}:{svc.port},CONTROLLER://{HOST}:{controller_port(svc.port)}",
        f"advertised.listeners={listener}://{HOST}:{svc.port},"
        f"CONTROLLER://{HOST}:{controller_port(svc.port)}",
        "controller.listener.names=CONTROLLER",
        f"inter.broker.listener.name={listener}",
        f"listener.security.protocol.map=CONTROLLER:{controller},{listener}:{listener}",
        f"log.dirs={svc.dir / 'data'}",
        f"num.partitions={replication}",
        f"default.replication.factor={replication}",
        f"min.insync.replicas={min_isr}",
        # The secure stack as production should run: a topic exists only when created.
        f"auto.create.topics.enable={'false' if secure else 'true'}",
        f"offsets.topic.replication.factor={replication}",
        "offsets.topic.num.partitions=3",
        f"transaction.state.log.replication.factor={replication}",
        f"transaction.state.log.min.isr={min_isr}",
        "transaction.state.log.num.partitions=3",
        f"share.coordinator.state.topic.replication.factor={replication}",
        f"share.coordinator.state.topic.min.isr={min_isr}",
        # A consumer group forms at once (tests and the demo start consumers often).
        "group.initial.rebalance.delay.ms=0",
        "num.network.threads=2",
        "num.io.threads=4",
        "num.recovery.threads.per.data.dir=1",
        "log.retention.hours=24",
        # Allocated on the heap at start: the default 128 MiB would need a larger heap.
        "log.cleaner.dedupe.buffer.size=16777216",
        # A broker killed -9 may register again after 3 s rather than Kafka's 9.
        "broker.session.timeout.ms=3000",
        "broker.heartbeat.interval.ms=1000",
    ]
    if svc.secrets is not None:
        keystore = svc.dir / "keystore.pem"
        password = svc.secrets.password("kafka_broker")
        lines += [
            f"sasl.enabled.mechanisms={SCRAM}",
            f"sasl.mechanism.inter.broker.protocol={SCRAM}",
            f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{BROKER_USER}" password="{password}";',
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={svc.secrets.ca_file}",
            "ssl.client.auth=none",
            # Only holders of the stack's key reach the controllers (the brokers).
            "listener.name.controller.ssl.client.auth=required",
            f"authorizer.class.name={AUTHORIZER}",
            f"super.users=User:{BROKER_USER};User:{ADMIN_USER};User:{CERT_PRINCIPAL}",
            "allow.everyone.if.no.acl.found=false",
        ]
    return lines


def _log4j2(svc: Service) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `delayq services up`; rewritten on every start. -->
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <RollingFile name="File" fileName="{svc.log_file}" filePattern="{svc.log_file}.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="File"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="kafka.authorizer.logger" level="WARN"/>
  </Loggers>
</Configuration>
"""


def _java() -> str:
    return require_program("java", "default-jre-headless")


def _classpath() -> str:
    return str(lib_dir() / "*")  # one argument: Java expands the wildcard itself


def prepare_with(ports: dict[str, int]) -> Callable[[Service], None]:
    """The prepare step of a node of a cluster whose nodes listen on `ports`."""

    def prepare(svc: Service) -> None:
        fetch()
        svc.dir.mkdir(parents=True, exist_ok=True)
        svc.dir.chmod(0o700)  # the folder of a file holding a password: its owner's only
        _write_private(svc.dir / "server.properties", "\n".join(_properties(svc, ports)) + "\n")
        (svc.dir / "log4j2.xml").write_text(_log4j2(svc))
        if svc.secrets is not None:
            # A PEM keystore holds the (unencrypted PKCS#8) key and its certificate.
            keystore = svc.dir / "keystore.pem"
            keystore.write_text(
                svc.secrets.key_file.read_text() + svc.secrets.cert_file.read_text()
            )
            keystore.chmod(0o600)
        if not (svc.dir / "data" / "meta.properties").exists():
            _format(svc)

    return prepare


def _write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only (0600, also when it existed before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _argument(value: str) -> str:
    """One argument of a java argument file, quoted."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _format(svc: Service) -> None:
    """Format the node's data folder for the stack's cluster (the first start only).
    The SCRAM users' passwords go in a java argument file (``java @file``, 0600, deleted
    afterwards), never on the command line, which every local user can read."""
    arguments = [
        STORAGE_TOOL,
        "format",
        "-t",
        _cluster_id(svc.state_root),
        "-c",
        str(svc.dir / "server.properties"),
    ]
    if svc.secrets is not None:
        for user, name in USERS.items():
            password = svc.secrets.password(name)
            arguments += ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
    argfile = svc.dir / "format.args"
    _write_private(argfile, "".join(_argument(arg) + "\n" for arg in arguments))
    command = [_java(), "-Xmx256m", "-cp", _classpath(), f"@{argfile}"]
    try:
        ran = subprocess.run(
            command, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False
        )
    finally:
        argfile.unlink(missing_ok=True)
    if ran.returncode != 0:
        raise ServicesError(f"formatting {svc.dir / 'data'} failed: {ran.stdout}{ran.stderr}")
    if svc.secrets is not None:
        (svc.dir / "data" / "scram-users").write_text("\n".join(USERS) + "\n")


def command(svc: Service) -> list[str]:
    return [
        _java(),
        *JVM_OPTIONS,
        f"-Dkafka.logs.dir={svc.dir}",
        f"-Dlog4j2.configurationFile={svc.dir / 'log4j2.xml'}",
        "-cp",
        _classpath(),
        MAIN_CLASS,
        str(svc.dir / "server.properties"),
    ]


def brokers_changed(root: Path) -> bool:
    """Whether the data folders were formatted for another number of brokers than the
    one wanted now (a quorum of 1 and one of 3 cannot share them)."""
    path = root / "kafka-brokers"
    return path.exists() and path.read_text().strip() != str(kafka_brokers_wanted(root))


def record_brokers(root: Path) -> None:
    (root / "kafka-brokers").write_text(f"{kafka_brokers_wanted(root)}\n")


def forget_data(root: Path) -> None:
    """Drop every node's data (the stack's cluster starts anew), e.g. on a new count."""
    for name in node_names(3):
        shutil.rmtree(root / name / "data", ignore_errors=True)
    (root / "kafka-cluster-id").unlink(missing_ok=True)


def probe(svc: Service) -> None:
    """A metadata request to this node that lists this node among the brokers."""
    if node_id(svc.name) not in kafka_broker_ids(svc.address, client_security(svc)):
        raise ServicesError(f"broker {node_id(svc.name)} is not registered yet")


def client_security(svc: Service, user: str = ADMIN_USER) -> dict[str, Any]:
    """aiokafka's options for this stack's listener: none, or SASL_SSL as `user`."""
    if svc.secrets is None:
        return {}
    return {
        "security_protocol": "SASL_SSL",
        "ssl_context": svc.secrets.client_tls(),
        "sasl_mechanism": SCRAM,
        "sasl_plain_username": user,
        "sasl_plain_password": svc.secrets.password(USERS[user]),
    }


def users_changed(root: Path) -> bool:
    """Whether the secure stack's data was formatted with other SCRAM users than
    USERS (users are made only when the data folder is formatted)."""
    made = root / "kafka" / "data" / "scram-users"
    formatted = (root / "kafka" / "data" / "meta.properties").exists()
    return formatted and (not made.exists() or made.read_text().split() != list(USERS))


def apply_acls(svc: Service) -> None:
    """Give the secure stack's users their ACLs (cluster/devstack/kafka_acls.py)."""
    if svc.secrets is not None:
        kafka_acls.apply(svc.address, client_security(svc), kafka_acls.stack_acls())
