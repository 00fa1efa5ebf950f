"""The secrets of the secure local stack (``delayq services up --secure``): a private CA,
one server certificate for 127.0.0.1/localhost signed by it, and random passwords.

They are made once, under ``$DELAYQ_STATE_DIR/secure/``, and kept: ``tls/`` holds the CA
and the server's certificate and key, ``secrets.json`` (mode 0600) the passwords. The
certificates come from the ``openssl`` command (Debian's ``openssl`` package), so the
stack needs no Python cryptography library.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cluster.devstack.packages import require_program
from cluster.devstack.service import ServicesError

CERT_DAYS = 3650
# Who the stack's passwords belong to: (service, user).
PASSWORD_NAMES = (
    "redis_delayq",
    "redis_admin",
    "mysql_delayq",
    "mysql_producer",
    "mysql_shop",
    "mysql_node",
    "mysql_admin",
    "zk_delayq",
    "kafka_broker",
    "kafka_admin",
    "kafka_node",
    "kafka_ingress",
    "kafka_producer",
)
REDIS_USER = "delayq"
REDIS_ADMIN = "admin"
ZK_USER = "delayq"


@dataclass(frozen=True)
class Secrets:
    """Where the secure stack's certificates are and what its passwords are."""

    root: Path  # $DELAYQ_STATE_DIR/secure
    passwords: dict[str, str]

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def cert_file(self) -> Path:
        return self.tls_dir / "server.pem"

    @property
    def key_file(self) -> Path:
        return self.tls_dir / "server.key"

    def password(self, name: str) -> str:
        return self.passwords[name]

    def client_tls(self) -> ssl.SSLContext:
        """A client context that trusts the stack's CA only (and checks the host name)."""
        return ssl.create_default_context(cafile=str(self.ca_file))


def _secrets_file(root: Path) -> Path:
    return root / "secrets.json"


def _openssl(*args: str) -> None:
    done = subprocess.run(
        [require_program("openssl", "openssl"), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise ServicesError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA in directory: (certificate, key). Also used by the tests to make
    a CA the stack does not trust."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "ca.pem", directory / "ca.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        str(CERT_DAYS),
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    key.chmod(0o600)
    return cert, key


def make_server_cert(ca_cert: Path, ca_key: Path, cert: Path, key: Path) -> None:
    """A certificate for 127.0.0.1 and localhost, signed by the CA (server and client
    use: Redis also presents it on its cluster bus)."""
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "server.csr", Path(tmp) / "ext.cnf"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            "/CN=localhost",
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(ca_cert),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            str(CERT_DAYS),
            "-extfile",
            str(ext),
        )
    key.chmod(0o600)


def ensure(root: Path) -> Secrets:
    """The stack's secrets, made on the first call and read afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    found = Secrets(root, _passwords(root))
    if not (found.ca_file.exists() and found.cert_file.exists() and found.key_file.exists()):
        ca_cert, ca_key = make_ca(found.tls_dir, "delayq local stack CA")
        make_server_cert(ca_cert, ca_key, found.cert_file, found.key_file)
    return found


def load(root: Path) -> Secrets:
    """The secrets an earlier ``up --secure`` made; an error if there are none."""
    if not _secrets_file(root).exists():
        raise ServicesError(f"no secure stack under {root}: run `delayq services up --secure`")
    return Secrets(root, _passwords(root))


def _passwords(root: Path) -> dict[str, str]:
    path = _secrets_file(root)
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        stored = {}
    except (OSError, ValueError) as exc:
        raise ServicesError(f"cannot read {path}: {exc}") from None
    missing = [name for name in PASSWORD_NAMES if name not in stored]
    if missing:
        # URL-safe, so the passwords go into URLs and config files unquoted.
        stored.update({name: secrets.token_urlsafe(24) for name in missing})
        # Created 0600 from the start: the file is never readable by others.
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(stored, out, indent=2)
        os.replace(path.with_suffix(".tmp"), path)
    return {name: str(stored[name]) for name in PASSWORD_NAMES}
