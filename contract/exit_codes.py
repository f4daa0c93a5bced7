"""Every command's exit codes, in one place (README "Exit codes"). A report that cannot be written (a full disk)
keeps an INVALID run INVALID and is INTERNAL otherwise."""
from __future__ import annotations

import sys

PASS = 0  # every SLO passes
OK = 0  # a command with no verdict (build, serve, collect, probe, compare) did its job
FAIL = 1  # an SLO fails (compare: a --fail-if-slower gate tripped)
USAGE = 2  # bad flags, profile, run directory: nothing started, or nothing to compare
INCONCLUSIVE = 3  # no SLO fails, some are undecided — or a master that could not analyse its run
INVALID = 4  # the run itself is not valid (saturation, a lost worker, an interrupt)
INTERNAL = 5  # tailrace itself (or the machine under it) failed: never an SLO verdict
# a `tailrace worker` that stopped because its master went silent past generator.master_timeout_s: its results are
# kept in its spool (tailrace collect); not a verdict, and not worth a restart (the run it belonged to is over)
WORKER_MASTER_LOST = 6
INTERRUPTED = 130  # Ctrl-C ended a command with nothing measured to keep (analyze, compare, probe, …): 128 + SIGINT


def internal_error(command: str, exc: BaseException) -> int:
    """A failure of tailrace itself (not an SLO, not bad input): one line on stderr naming the file that holds the
    traceback, and exit code INTERNAL (5) — so a CI job never mistakes a crash for a failed SLO (1)."""
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix=f"tailrace-{command}-crash-", suffix=".txt")
    with open(fd, "w") as handle:
        traceback.print_exception(exc, file=handle)
    print(f"tailrace {command}: internal error ({type(exc).__name__}: {exc}); tailrace itself failed — the "
          f"traceback is in {path}", file=sys.stderr)
    return INTERNAL

