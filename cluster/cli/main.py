"""The `delayq` command line.

    delayq services up|down|status|env   the local development stack
    delayq db migrate|prune|move-shard   the MySQL schema, retention, shard moves
    delayq node [--ready-file PATH]      run a node until SIGTERM/SIGINT (start more
                                         processes, here or elsewhere, to scale)
    delayq ingress [--ready-file PATH]   schedule the jobs produced to ingress_topic
    delayq cluster status                members, slot map, per-slot depth, MySQL servers
    delayq recover                       re-add to Redis the pending jobs it lost
    delayq dead list|show|replay|purge   the dead-letter set
    delayq recurring list|show|remove    recurring schedules
    delayq expired [--topic T]           jobs that expired (not published in time)
    delayq get JOB_ID [--history]        show a job's durable record (and history)
    delayq cancel JOB_ID                 cancel a job
    delayq jobs list|cancel [filters]    search jobs; cancel those a filter matches
    delayq schedule --topic T ...        schedule a job (payload from JSON, a file, stdin)
    delayq reschedule JOB_ID --delay D   give a job a new due time

Settings come from DELAYQ_* environment variables and the TOML file named by
DELAYQ_CONFIG or --config; see docs/configuration.md.

main() parses the command line (parser.py), reads the settings and hands them to the
command: jobs.py, operations.py (the cluster and its databases), processes.py (node,
ingress, web, top) or services.py (the local stack, which needs no settings).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from cluster.cli import actions, jobs, operations, processes, search
from cluster.cli.output import shown
from cluster.cli.parser import build_parser
from cluster.cli.services import services
from cluster.cli.unreachable import unavailable
from cluster.errors import ConfigError
from cluster.settings.config import Settings
from cluster.settings.logs import TEXT_FORMAT, configure_logging

# Every command but `services`: the settings and the parsed arguments → the exit code.
COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "db": operations.db,
    "node": processes.node,
    "ingress": processes.ingress,
    "cluster": operations.cluster_status,
    "top": processes.top,
    "web": processes.web,
    "recover": operations.recover,
    "dead": jobs.dead,
    "recurring": jobs.recurring,
    "expired": jobs.expired,
    "get": jobs.get,
    "cancel": jobs.cancel,
    "jobs": search.jobs,
    "schedule": actions.schedule,
    "reschedule": actions.reschedule,
}


# The long-running processes log what they do; the other commands print their answer
# and log only warnings unless --log-level asks for more.
_INFO_BY_DEFAULT = {"node", "ingress", "web", "services"}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.log_level is None:
        args.log_level = "INFO" if args.command in _INFO_BY_DEFAULT else "WARNING"
    logging.basicConfig(level=args.log_level, format=TEXT_FORMAT)
    if args.command == "services":
        return services(args)
    if args.config:
        os.environ["DELAYQ_CONFIG"] = args.config
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"delayq: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, settings.log_format, settings.node_id)
    try:
        return COMMANDS[args.command](settings, args)
    except (ConfigError, ValueError, RuntimeError) as exc:
        print(f"delayq: {shown(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        # A store that does not answer: one line with its address, not a traceback.
        known = unavailable(settings, exc)
        if known is None:
            raise
        print(f"delayq: {shown(known)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
