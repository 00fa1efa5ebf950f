"""`delayq services`: the local development stack (cluster/devstack), imported only when
this command runs; it needs no settings."""

from __future__ import annotations

import argparse
import sys


def services(args: argparse.Namespace) -> int:
    try:
        from cluster.devstack import services_command
    except ImportError as exc:  # psutil comes with the local extra only
        print(
            f"delayq services: {exc.name} is not installed: pip install 'delayq[local]'",
            file=sys.stderr,
        )
        return 1
    if args.production_shape:
        from cluster.devstack import production

        return production.run(args.action, purge=args.purge)
    return services_command.run(
        args.action,
        purge=args.purge,
        redis_cluster=args.redis_cluster,
        replicas=args.replicas,
        secure=args.secure,
        kafka=args.kafka,
        kafka_brokers=args.kafka_brokers,
        mysql_servers_count=args.mysql_servers,
        galera_cluster=args.galera,
        zk_ensemble_size=args.zk_ensemble,
    )
