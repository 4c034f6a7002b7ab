"""What every process of streams/ shares: its metrics, the outputs it publishes and how
(outputs.py, verdict_log.py, redis_batch.py), commits and errors, logging, and the web pages'
guard. No process folder's; imported by all of them."""
