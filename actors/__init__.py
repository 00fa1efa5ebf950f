"""The delayq node runtime: node assembly (node.py), the actor lifecycle and supervisor,
ZooKeeper membership, slot assignment and ownership, preflight checks, the Kafka
publisher, failpoints, and one module per actor. `delayq node` runs it; producers never
import it (they use the package `cluster`).

May import: everything of `cluster` below it (client, observe, process and their layers);
never cluster.web, cluster.ingress or cluster.cli.
"""
