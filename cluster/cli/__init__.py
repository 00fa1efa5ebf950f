"""The ``delayq`` command line and ``delayq top``, the only terminal UI (rich).

The top layer: it may import anything, including the node runtime (``actors``), the web
server and the ingress, and ``cluster.devstack`` only inside ``delayq services``. Each
command imports what it runs when it runs, so ``delayq --help`` and the light commands
load none of these.

- ``main``: ``main()``, which reads the settings and hands them to the command
- ``parser``: the argument parser, one function per command
- ``jobs``: ``get``, ``cancel``, ``expired``, ``dead``, ``recurring``
- ``actions``, ``parser_actions``: ``schedule`` and ``reschedule``, and their parsers
- ``unreachable``: a store that does not answer, said in one line instead of a traceback
- ``times``: times as people read them (ISO-8601 UTC); ``progress``: rich progress bars
- ``operations``: ``db migrate``, ``db prune``, ``cluster status``, ``recover``
- ``processes``: ``node`` (and ``node --check``), ``ingress``, ``web``, ``top``
- ``services``: ``delayq services``, the local development stack
- ``top``: ``delayq top``'s terminal view of the snapshots from cluster.observe.snapshot
- ``output``: untrusted text and JSON made safe to print
- ``loop``: the event loop a command runs on
"""
