"""Failure modes: what a verdict that is not a clean pass failed of, as a signature a stream of
verdicts can be grouped by without a model call (signature.py), its tool's error folded into a
template (errors.py). May import `rules`, `masking` and below."""
