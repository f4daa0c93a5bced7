"""What the report's figures leave out, shared by the figure process (plots.py) and the page (html.py). Only the
standard library is imported here: the figure process imports this at its start, beside matplotlib, while the
analysis computes on the same cores (docs/DECISIONS.md "The figure process imports only what it draws with")."""

MIN_UTILIZATION_TO_PLOT = 0.1  # below this on every endpoint, the queue-vs-utilization figure draws nothing
