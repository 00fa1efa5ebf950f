"""delayq actors: one module per actor of a node."""
