"""Redis Lua scripts of delayq, one file per atomic step (shipped as package data)."""
