"""A window as the worker keeps it: the table record formats, written and read in one
place (records.py), and the masked timeline kept after it closes (timeline.py). May import
`inflight`, `agreement`, `rules` and below.
"""
