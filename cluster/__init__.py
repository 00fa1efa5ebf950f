"""delayq node runtime: config, client, stores, CLI."""
