"""ZooKeeper of the local stack: standalone ``QuorumPeerMain`` on Java, from the Debian
``zookeeper`` package, with a config and log4j setup of its own. How to prepare, start
and probe it (``ruok``).
"""

from __future__ import annotations

from pathlib import Path

from cluster.devstack.packages import ZOOKEEPER_JAR, require_program
from cluster.devstack.service import HOST, Service, ServicesError, tcp_exchange

# The Debian zookeeper.jar lists its dependencies in its manifest, except a logging backend:
# pick log4j 1.2 through slf4j explicitly ("/usr/share/java/*" holds several SLF4J bindings
# and the JVM would pick one at random).
_LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))


def _config(svc: Service) -> Path:
    return svc.dir / "zoo.cfg"


def prepare(svc: Service) -> None:
    data = svc.dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    _config(svc).write_text(
        "\n".join(
            [
                "# Written by `delayq services up`; rewritten on every start.",
                "tickTime=500",
                "minSessionTimeout=1000",
                "maxSessionTimeout=60000",
                "initLimit=10",
                "syncLimit=5",
                f"dataDir={data}",
                f"clientPort={svc.port}",
                f"clientPortAddress={HOST}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,stat,srvr",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
            ]
        )
        + "\n"
    )
    # Our own log4j config: the Debian one needs -Dzookeeper.root.logger and friends.
    (svc.dir / "log4j.properties").write_text(
        "\n".join(
            [
                "# Written by `delayq services up`; rewritten on every start.",
                "log4j.rootLogger=INFO, FILE",
                "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
                f"log4j.appender.FILE.File={svc.log_file}",
                "log4j.appender.FILE.MaxFileSize=10MB",
                "log4j.appender.FILE.MaxBackupIndex=3",
                "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
                "log4j.appender.FILE.layout.ConversionPattern="
                "%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n",
            ]
        )
        + "\n"
    )


def command(svc: Service) -> list[str]:
    if not ZOOKEEPER_JAR.exists():
        raise ServicesError(f"{ZOOKEEPER_JAR} not found; install the zookeeper package")
    jars = [ZOOKEEPER_JAR, *_LOGGING_JARS]
    if all(jar.exists() for jar in jars):
        classpath = ":".join(str(jar) for jar in jars)
    else:
        classpath = "/etc/zookeeper/conf:/usr/share/java/*"
    return [
        require_program("java", "default-jre-headless"),
        "-Xms64m",
        "-Xmx512m",
        f"-Dzookeeper.log.dir={svc.dir}",
        f"-Dzookeeper.log.file={svc.log_file.name}",
        f"-Dlog4j.configuration={(svc.dir / 'log4j.properties').as_uri()}",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(_config(svc)),
    ]


def probe(svc: Service) -> None:
    reply = tcp_exchange(svc.port, b"ruok")
    if reply != b"imok":
        raise ServicesError(f"ruok answered {reply!r}")
