"""The ``delayq`` command line and ``delayq top``, the only terminal UI (rich).

The top layer: it may import anything, including the node runtime (``actors``), the web
server and the ingress, and ``cluster.devstack`` only inside ``delayq services``.

- ``main``: ``main()``, the argument parser and the commands
- ``top``: ``delayq top``
"""
