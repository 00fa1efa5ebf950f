"""The Redis side: every Lua script of lua/ (shipped as cluster.lua) as a typed async
call, how scripts are loaded and run (batches per slot, fencing, waiting for replicas),
and the Python values that go in and come out.

May import: cluster.errors, cluster.settings, cluster.connections, cluster.model, and
cluster.store for the JobRecord type a reload puts into Redis.

- ``facade``: ``Scripts``, one method per script, made of the modules by role below
- ``fire_path``: add, move, claim, ack, nack, reap, fill, release, take
- ``journal_scripts``: a slot's journal read and trimmed, in-flight deadlines listed
- ``dead_letter_scripts``: the dead-letter set listed, replayed, purged
- ``change_scripts``: cancel, untomb, reschedule
- ``runner``: loading with includes, EVALSHA, per-slot batches and their errors
- ``codec``: what goes into the scripts and what comes out, as Python values
- ``restores``: putting back the jobs of cancels that failed half-way (uncancel, restore)
- ``takeover``: retrying at once the claims of a dead node whose slot was just taken
"""
