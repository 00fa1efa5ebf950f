"""Versioned MySQL DDL of delayq (shipped as package data)."""
