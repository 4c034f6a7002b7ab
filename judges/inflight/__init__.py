"""In-flight control, while a run still runs: budgets (budgets.py) and the spend counted
against them (spend.py), loops (loops.py), what a stop saved (savings.py), and when an
iterative workflow may stop early (early_stop.py). May import `rules` and below.
"""
