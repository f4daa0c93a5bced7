"""The Locust processes' control channel: the locustfile, the master's control, a worker's admission and plan
inbox, and every adaptation of Locust's internals (locust_adaptations.py)."""
