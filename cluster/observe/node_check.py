"""`delayq node --check`: ask the local node's /healthz and /readyz, for probes and scripts.

Exit codes: 0 the node answered yes, 1 it answered no or did not answer, 2 there is
nothing to ask (metrics_port = 0). The node's answer (JSON: status, problems) is
printed, so a probe's log says why.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from cluster.settings.config import Settings

TIMEOUT_S = 5.0
ENDPOINTS = {"live": ("/healthz",), "ready": ("/readyz",), "all": ("/healthz", "/readyz")}


def local_base_url(settings: Settings) -> str:
    """The node's endpoint as reached from this machine."""
    host = settings.metrics_host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.metrics_port}"


def check_node(settings: Settings, which: str) -> int:
    if not settings.metrics_port:
        print(
            "delayq node --check: metrics_port is 0, so the node serves no /healthz or "
            "/readyz; set DELAYQ_METRICS_PORT for the node and for this check",
            file=sys.stderr,
        )
        return 2
    code = 0
    for path in ENDPOINTS[which]:
        url = local_base_url(settings) + path
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
                print(f"{path}: {answer.status} {answer.read().decode(errors='replace')}")
        except urllib.error.HTTPError as refused:  # 503: the node said no
            print(f"{path}: {refused.code} {refused.read().decode(errors='replace')}")
            code = 1
        except OSError as exc:  # nothing listening, or no answer in time
            print(f"{path}: no answer from {url}: {exc}")
            code = 1
    return code
