"""The fault harness: the one place for what the fault modules, the soak and the
correctness benchmarks share.

- verdict.py: Ledger (what the clients were told), verdict (what fired, what the stores
  hold, whether they agree), Verdict, assert_safe (what every fault scenario holds to).
- load.py: steady_load (500 jobs/s due 0.3-2 s ahead) and reading (the collector kept
  polling meanwhile).
- settle.py: settle (wait until nothing is lost, pending or firing, then judge) and the
  scenario rows it records in benchmarks/results/faults.jsonl (record, write_row).
- scenario.py: scenario (nodes under the load while a fault strikes; options for
  metrics sampling, serving before the load, all nodes running throughout), Run and
  Round (a run's nodes, metrics and marks), down_for and crash_at.
- stores.py: in_redis and redis_places (what Redis holds of a job).
- timing.py: spread_s, lateness and longest_pause_s (read from fired records).
- private.py: PrivateStack (a `delayq services` stack of a module's own), gone, and
  the fixture factories for its private_env, settings and redis fixtures.
- redis_cluster.py: the shared stack's Redis Cluster with replicas, as the failover
  scenarios use it (its nodes and masters, its health, the fixture healthy_cluster).
"""
