"""`tracejudge demo`: an embedded broker, a worker and sample traces."""
