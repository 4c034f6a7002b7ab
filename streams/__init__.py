"""The streaming side: everything that knows topics, tables, agents and Redis."""
