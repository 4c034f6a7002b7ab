"""Per-agent tables: the TOML files a team writes once per agent (budgets, checks,
criteria), read one way: a `[default]` table and `[agents."NAME-OR-PATTERN"]` tables, an exact
name winning over a pattern, then the first pattern that matches. Pure (no Kafka, Faust or
Redis); the judges read their own keys from what this reads. Not part of the event contract
(models/), which agents install."""
