"""A conversation judged as a conversation: the requests of one session (`session_key`), each
a user turn, assembled into one run the rules read (assemble.py), beside the per-request
verdicts (judge.py); a closed request condensed into its turn (turns.py). May import `checks`,
`rules`, `masking` and below."""
