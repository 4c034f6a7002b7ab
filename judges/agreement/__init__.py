"""Agreement with ground truth: how verdicts agree with outcomes (tally.py), per-rule
rates (rule_rates.py), calibrated alert thresholds (calibration.py), and what the actions
tracejudge asks for did (action_effects.py). Pure arithmetic; may import `rules` and below.
"""
