"""Masking and clipping: secrets and personal data out of any text before it leaves the
process (redact.py, with the detectors in detectors.py), and clipping that never cuts through a
secret (clipping.py). The bottom layer: imports nothing else of the judges.
"""
