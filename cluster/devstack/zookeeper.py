"""ZooKeeper of the local stack: ``QuorumPeerMain`` on Java, from the Debian ``zookeeper``
package, with a config and log4j setup of its own: standalone, or one server of the
ensemble of cluster/devstack/zk_ensemble.py. How to prepare, start and probe it (``srvr``:
ready once it serves requests, which a server of an ensemble does only with a quorum).
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


def config(data: Path, port: int, servers: list[str] | None = None) -> str:
    """zoo.cfg of a server with data folder `data` and client port `port`: standalone, or
    with `servers` (``server.N=host:peer:election`` lines) one server of an ensemble."""
    return (
        "\n".join(
            [
                "# Written by `delayq services up`; rewritten on every start.",
                "tickTime=500",
                "minSessionTimeout=1000",
                "maxSessionTimeout=60000",
                "initLimit=10",
                "syncLimit=5",
                f"dataDir={data}",
                f"clientPort={port}",
                f"clientPortAddress={HOST}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,stat,srvr",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
                *(servers or []),
            ]
        )
        + "\n"
    )


def prepare(svc: Service) -> None:
    """A standalone server."""
    prepare_server(svc, None)


def prepare_server(svc: Service, servers: list[str] | None) -> None:
    """Folders and config of a server: standalone, or of an ensemble with `servers`."""
    data = svc.dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    _config(svc).write_text(config(data, svc.port, servers))
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


def mode(port: int) -> str | None:
    """What `srvr` says the server on `port` is: "standalone", "leader" or "follower";
    None while it serves no requests (an ensemble's server without a quorum). `ruok`
    would not tell: it answers imok either way."""
    reply = tcp_exchange(port, b"srvr").decode(errors="replace")
    for line in reply.splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


def probe(svc: Service) -> None:
    """Ready once it serves requests (`srvr` names its mode)."""
    if mode(svc.port) is None:
        raise ServicesError(f"{svc.name} serves no requests yet (no quorum)")
