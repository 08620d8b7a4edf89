"""Environments for multi-turn episodes."""
