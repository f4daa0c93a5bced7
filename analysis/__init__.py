"""Analysis of run directories: clock correction, statistics, queueing, SLO verdicts and the report."""
