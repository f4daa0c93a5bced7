"""How tailrace writes tables to a terminal: one rich Console for every command, as wide as the terminal, or
WIDE columns when the output is not a terminal (CI logs, pipes), so tables are never squeezed to 80 columns."""
from __future__ import annotations

import shutil
import sys

WIDE = 200


def console(stderr: bool = False):
    """A rich Console: the terminal's width on a terminal, WIDE columns otherwise."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(WIDE, shutil.get_terminal_size((WIDE, 24)).columns)
    return Console(file=stream, width=width)
