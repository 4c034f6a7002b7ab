"""Example checks a team would write: for a customer-service agent under an airline's policy
(airline.toml, airline.py), and for a coding agent (coding.py). docs/checks.md says how to use
them; BENCHMARKS.md what they change on the shared sets."""
