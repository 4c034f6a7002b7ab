"""A conversation judged as a conversation: the requests of one session (`session_key`), each
a user turn, assembled into one run the rules read (assemble.py), beside the per-request
verdicts (judge.py); a closed request condensed into its turn (turns.py); what the LLM judge
reads of a turn (judge_input.py). May import `llm`, `checks`, `rules`, `masking` and below."""
