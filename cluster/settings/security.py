"""What the Redis and MySQL connections share about security: TLS contexts that verify
the server, the words for a TLS failure (a store's refusal becomes one StoreAccessError
at start-up), and the redaction of passwords in URLs, settings and messages.
docs/security.md."""

from __future__ import annotations

import re
import ssl

# Query parameters that hold a secret (?password=, redis-py reads it; ?auth_token=, …).
_SECRET_NAME = r"[^=&#;\s]*(?:password|passwd|pwd|secret|token)[^=&#;\s]*"
# In free text a URL ends at whitespace; a setting's whole value may hold spaces.
_TEXT_QUERY_SECRET = re.compile(rf"(?P<key>[?&;]{_SECRET_NAME}=)[^&#;\s]*", re.IGNORECASE)
_VALUE_QUERY_SECRET = re.compile(rf"(?P<key>[?&;]{_SECRET_NAME}=)[^&]*", re.IGNORECASE)
_TEXT_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):[^/\s]*@")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def redact_url(text: str) -> str:
    """text with the password of every URL in it replaced by ***
    (redis://user:secret@host → redis://user:***@host), and so the value of every query
    parameter named like a password, secret or token (redis://host/0?password=***).
    A text that starts with its one URL is taken for that URL (redact_value: the
    password may hold spaces); elsewhere in free text a URL ends at whitespace."""
    if _URL_START.match(text) and text.count("://") == 1:
        return redact_value(text)
    return _redact_text(text)


def redact_value(value: str) -> str:
    """A setting's whole value with its secrets replaced by ***. When it is a URL, its
    password is whatever lies between user: and the @ before the host, spaces and other
    characters that should have been percent-encoded included (mysql://u:***@host/db)."""
    scheme, sep, rest = value.partition("://")
    if sep and _SCHEME.fullmatch(scheme):
        # The last @: a password may hold @ and ?x=; an @ further on (in a query
        # parameter's path) only hides more than it needs to.
        end = rest.rfind("@")
        colon = rest.find(":", 0, end) if end != -1 else -1
        if colon != -1:
            value = f"{scheme}://{rest[: colon + 1]}***{rest[end:]}"
    return _redact_text(_VALUE_QUERY_SECRET.sub(r"\g<key>***", value))


def _redact_text(text: str) -> str:
    return _TEXT_QUERY_SECRET.sub(r"\g<key>***", _TEXT_USERINFO.sub(r"\g<head>:***@", text))


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
