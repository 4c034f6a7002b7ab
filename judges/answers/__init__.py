"""The answer classifiers: is a model's answer generic filler, a clarifying question only,
or substantive (generic.py), with its phrase families (families.py) and whether a prompt is a
concrete task (prompt_kind.py). May import `text` and `masking`.
"""
