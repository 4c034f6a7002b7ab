"""How the rules read text: where a sentence ends (sentences.py), which parts of a text are
prose and which an artifact such as a patch, a log or JSON (kinds.py). May import `masking`.
"""
