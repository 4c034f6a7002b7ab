"""The LLM judge: its input (prompt.py), the answer it gives (answer.py), the client that asks
it (client.py, with limit.py, breaker.py and usage.py), the alert when it keeps failing
(monitor.py) and which requests it reads (sampling.py). May import `windows` and below."""
