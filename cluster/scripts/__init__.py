"""The Redis side: every Lua script of lua/ (shipped as cluster.lua) as a typed async
call, how scripts are loaded and run (batches per slot, fencing, waiting for replicas),
and the Python values that go in and come out.

May import: cluster.errors, cluster.settings, cluster.connections, cluster.model, and
cluster.store for the JobRecord type a reload puts into Redis.

- ``facade``: ``Scripts``, one method per script
- ``runner``: loading with includes, EVALSHA, per-slot batches and their errors
- ``codec``: what goes into the scripts and what comes out, as Python values
- ``restores``: putting back the jobs of cancels that failed half-way (uncancel, restore)
- ``takeover``: retrying at once the claims of a dead node whose slot was just taken
"""
