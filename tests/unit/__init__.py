"""Tests that need no service: pure logic, files and layout (`make check` runs them)."""
