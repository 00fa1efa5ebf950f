"""The commands that run a long-lived process: `delayq node` (or its `--check`),
`ingress`, `web` and `top`.

Each command takes the settings and the parsed arguments and returns the exit code. The
node runtime, the ingress, the web server and the terminal view are imported only by the
command that runs them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cluster.cli.loop import run
from cluster.settings.config import Settings


def node(settings: Settings, args: argparse.Namespace) -> int:
    if args.check:
        from cluster.observe.node_check import check_node

        return check_node(settings, args.check)
    from actors.node import run_node

    ready_file = Path(args.ready_file) if args.ready_file else None
    return run(run_node(settings, ready_file=ready_file))


def ingress(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.ingress.process import run_ingress

    ready_file = Path(args.ready_file) if args.ready_file else None
    return run(run_ingress(settings, ready_file=ready_file))


def web(settings: Settings, args: argparse.Namespace) -> int:
    from cluster.web.server import serve

    host = settings.web_host if args.host is None else args.host
    port = settings.web_port if args.port is None else args.port
    if not 0 <= port <= 65535:
        print("delayq web: --port must be 0..65535", file=sys.stderr)
        return 2
    return run(serve(settings, host, port))


def top(settings: Settings, args: argparse.Namespace) -> int:
    if not args.interval > 0:
        print("delayq top: --interval must be > 0", file=sys.stderr)
        return 2
    if args.json and not args.once:
        print("delayq top: --json needs --once", file=sys.stderr)
        return 2
    from cluster.cli.top import run_top

    try:
        return run(run_top(settings, args.interval, args.once, args.json))
    except KeyboardInterrupt:
        return 0
