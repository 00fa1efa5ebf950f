"""The Debian packages and programs the local stack runs: finding the programs (also in
the sbin folders a non-root PATH lacks), and installing missing packages with apt-get.

Redis, MariaDB and ZooKeeper come from Debian packages; the Kafka-protocol broker comes
from a PyPI wheel instead (cluster/devstack/tansu.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from cluster.devstack.service import ServicesError

APT_PACKAGES = ("redis-server", "mariadb-server", "zookeeper")
SECURE_APT_PACKAGES = ("openssl", "stunnel4")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def find_program(name: str) -> str | None:
    """The path of a program on PATH or in an sbin folder, or None."""
    found = shutil.which(name)
    if found:
        return found
    for directory in _SBIN_DIRS:
        candidate = Path(directory) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require_program(name: str, package: str) -> str:
    """The path of a program, or an error naming the Debian package that has it."""
    found = find_program(name)
    if found is None:
        raise ServicesError(f"{name} not found; install the Debian package {package}")
    return found


def _missing_packages(secure: bool = False, maven: bool = False) -> list[str]:
    present = {
        "redis-server": find_program("redis-server") is not None,
        "mariadb-server": find_program("mariadbd") is not None,
        "zookeeper": ZOOKEEPER_JAR.exists(),
        "openssl": find_program("openssl") is not None,
        "stunnel4": find_program("stunnel4") is not None,
        "maven": find_program("mvn") is not None,
    }
    wanted = APT_PACKAGES + (SECURE_APT_PACKAGES if secure else ()) + (("maven",) if maven else ())
    return [package for package in wanted if not present[package]]


def ensure_packages(*, secure: bool = False, maven: bool = False) -> None:
    """Install the missing Debian packages with apt-get (as root), or say how to; the
    secure stack also needs openssl (its certificates) and stunnel4 (Tansu's TLS front),
    and Apache Kafka needs Maven (maven: to fetch its jars once)."""
    missing = _missing_packages(secure, maven)
    if not missing:
        return
    apt_install(missing)
    still = _missing_packages(secure, maven)
    if still:
        raise ServicesError(f"apt-get ran but these are still missing: {' '.join(still)}")


def apt_install(missing: list[str]) -> None:
    """apt-get install these packages (as root), or raise an error saying how to."""
    install = f"DEBIAN_FRONTEND=noninteractive apt-get install -y {' '.join(missing)}"
    if os.geteuid() != 0:
        raise ServicesError(
            f"missing Debian packages: {' '.join(missing)}. As root, run:\n"
            f"  apt-get update && {install}"
        )
    if shutil.which("apt-get") is None:
        raise ServicesError(
            f"missing packages {' '.join(missing)} and no apt-get to install "
            "them: this stack expects Debian or Ubuntu"
        )
    print(f"installing {' '.join(missing)} with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The packages' maintainer scripts may try to start system-wide services through
    # invoke-rc.d on the default ports; where policy-rc.d denies it, that is fine.
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise ServicesError(f"`{shlex.join(command)}` failed with exit {done.returncode}")


def ensure_prometheus() -> str:
    """The path of the prometheus server (Debian's package `prometheus`, which also has
    promtool), installed when missing: tests scrape a node with it."""
    if find_program("prometheus") is None or find_program("promtool") is None:
        apt_install(["prometheus"])
    return require_program("prometheus", "prometheus")
