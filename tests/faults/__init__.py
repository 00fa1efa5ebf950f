"""The fault harness: the one place for what the fault modules, the soak and the
correctness benchmarks share.

- verdict.py: Ledger (what the clients were told), verdict (what fired, what the stores
  hold, whether they agree), Verdict, assert_safe (what every fault scenario holds to).
- load.py: steady_load (500 jobs/s due 0.3-2 s ahead) and reading (the collector kept
  polling meanwhile).
- settle.py: settle (wait until nothing is lost, pending or firing, then judge) and the
  scenario rows it records in benchmarks/results/faults.jsonl (record, write_row).
- scenario.py: scenario, the one scenario runner (nodes under a load while a fault
  strikes, settled and judged; options for the nodes, the load (steady for a time or
  until after the fault, or one's own with its ledger, a watchdog on its end),
  settling, metrics sampling, serving before the load, all nodes running throughout),
  which every module's runner wraps; Stage and its fixture `stage` (the settings,
  client, Redis, topic, collector and tmp_path a scenario runs on), Run and Round (a
  run's nodes, metrics and marks), down_for and crash_at (a scenario too).
- stores.py: in_redis and redis_places (what Redis holds of a job).
- timing.py: spread_s, lateness and longest_pause_s (read from fired records).
- shared.py: shared_pid (a shared service's pid, for a test marked `alone` to stop it).
- private.py: PrivateStack (a `delayq services` stack of a module's own), gone, and
  the fixture factories for its private_env, settings and redis fixtures.
- redis_cluster.py: the shared stack's Redis Cluster with replicas, as the failover
  scenarios use it (its nodes and masters, its health, the fixture healthy_cluster).
"""
