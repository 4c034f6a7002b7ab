"""The modes agent: each agent's failure modes counted over sliding windows, announced on the
modes topic when one appears, jumps or goes quiet (docs/modes.md)."""
