"""Layered configuration: defaults, then files, then overrides."""
