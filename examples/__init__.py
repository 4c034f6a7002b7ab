"""Runnable agents that publish to tracejudge through each integration (see README.md here)."""
