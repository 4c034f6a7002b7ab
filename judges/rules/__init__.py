"""The verdict rules: the rule judge (judge.py) and what it reads of a closed run: how it
ended (endings.py), process trouble (trouble.py), the declared plan (plans.py), the conversation
with the user (conversation.py), what the final answer claims against the trace (claims.py,
answer_checks.py), phrase families (phrases.py), and what one run did against its agent's
normal (agent_norms.py, baselines.py). May import `answers`, `text` and `masking`.
"""
