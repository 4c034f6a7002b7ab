"""A conversation judged as a conversation: the requests of one session (`session_key`), each
a user turn, assembled into one run the rules read, beside the per-request verdicts."""
