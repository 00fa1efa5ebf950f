"""Settings: what a process is told (Settings, from DELAYQ_* variables or arguments),
the TLS contexts and access errors of every store, and logging.

May import: cluster.errors and the standard library only. Everything else imports this.

- ``config``: ``Settings``, ``ConfigError``, URL redaction
- ``security``: TLS client contexts and the shared store-access errors
- ``logs``: logging set-up (plain or JSON lines)
"""
