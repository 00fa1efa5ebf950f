"""What the Redis and MySQL connections share about security: TLS contexts that verify
the server, and StoreAccessError, the one error a store's refusal becomes at start-up
(wrong password, TLS on one side only, an untrusted certificate). docs/security.md."""

from __future__ import annotations

import ssl


def client_tls(
    cafile: str = "", certfile: str = "", keyfile: str = "", *, check_hostname: bool = True
) -> ssl.SSLContext:
    """A client TLS context that requires a valid server certificate: signed by cafile
    (or, when it is "", by the system's trusted CAs) and, with check_hostname, issued
    for the host connected to. certfile/keyfile: a client certificate, when the server
    asks for one."""
    context = ssl.create_default_context(cafile=cafile or None)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if certfile:
        context.load_cert_chain(certfile, keyfile or None)
    return context


def tls_cause(error: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a driver's connection error, if there is one."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_tls_error(error: ssl.SSLError, ca_setting: str) -> str:
    """A TLS failure in words an operator can act on; ca_setting names the setting of
    the CA file (redis_ssl_cafile, mysql_ssl_ca)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"its TLS certificate is not trusted ({error.verify_message}): "
            f"set {ca_setting} to the CA that signed the server's certificate"
        )
    reason = error.reason or str(error)
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"the TLS handshake failed ({reason}): the port does not speak TLS"
    return f"the TLS handshake failed ({reason})"
