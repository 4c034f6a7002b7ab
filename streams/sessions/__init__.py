"""Session verdicts: the session agent's state, handler and timer (docs/sessions.md)."""
