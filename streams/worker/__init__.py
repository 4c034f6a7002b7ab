"""The worker: Faust wiring (app.py) around handlers that take explicit collaborators."""
