"""The LLM judge stage: its own consumer, verdict cache and shared rate limit."""
