"""What every long-running delayq process shares: the process runner (signals, the
ready file, start-up races), the ready file, and the /metrics endpoint.

May import: cluster.errors, cluster.settings.

- ``runner``: ``run_process``, for ``delayq node`` and ``delayq ingress``
- ``ready_file``: written atomically once a process is ready, cleared when it stops
- ``metrics_http``: ``MetricsEndpoint`` (/metrics, /healthz, /readyz)
"""
