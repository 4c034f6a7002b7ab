"""Making a closed request's verdict and what it leaves as: the rules blended with the LLM
judge and `success` / `incomplete` settled (conclude.py), the whole making of a closed window
(make.py), its records encoded and masked (encoded.py), and what to do with one model answer
(retries.py). The top layer: may import every other folder of the judges.
"""
