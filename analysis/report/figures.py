"""Who draws the report's figures (analysis/report/plots.py): one small interface, `Figures`, in front of two parts.

`InlineFigures` draws a figure when the report asks for it (the Python API, tests). `ProcessFigures` is what
`tailrace analyze` uses (analysis/analyze_command.py): a child process, started before the analysis, imports
matplotlib while the run is read; the analysis hands it each figure's numbers once they exist (`submit`), and the
child draws while the analysis computes the statistics after them on the other core. matplotlib is pure Python:
in a thread it would hold the GIL against the statistics. Once the statistics are done and the report asks for its
first figure, this process' core is free: the child hands back the last of the figures it has not begun (SPLIT) and
this process draws them while the child draws the rest. The report is the same either way: a figure the child
could not draw — it died, hung, or an input did not pickle — is drawn here instead.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Callable

log = logging.getLogger(__name__)

# the figures a child may be asked for: functions of analysis/report/plots.py, each returning an SVG string or None
FIGURES = frozenset({"heatmap_p99", "latency_cdfs", "over_time_of", "decomposition_bars", "queue_vs_utilization",
                     "server_timeline", "clock_offsets", "pareto_scatter", "token_heatmap", "token_cdfs",
                     "token_over_time", "ttft_bars", "trace_rates", "sessions_over_time", "hardware_over_time",
                     "accuracy_vs_load"})
# the messages to the child, each a tuple (kind, figure name, arguments); the child answers GET and SPLIT
DRAW = "draw"  # draw `name` of the arguments, after those before it (a later DRAW of the same name replaces it)
GET = "get"  # answer with (svg or None, None) or (None, why it was not drawn), and forget the figure; one not yet
# begun is drawn next
SPLIT = "split"  # the asker is done with the statistics and draws some waiting figures itself (arguments: (whether
# it has imported plots,)): answered at once with the names of those handed back — the last ones waiting — dropped
STOP = "stop"  # exit
READY_PROBE = "ready?"  # a name never drawn: its GET is answered once the child's imports are done
PLOTS = "tailrace.analysis.report.plots"  # the module that draws, imported where a figure is first drawn
IMPORT_FIGURES = 4  # figures an asker without matplotlib takes fewer: its import (~0.5–0.7 s) is about four drawn
ANSWER_TIMEOUT_S = 60.0  # a child that has not answered by then is given up: the figure is drawn here
STOP_TIMEOUT_S = 2.0  # then the child is killed


def draw(name: str, *args) -> str | None:
    """analysis/report/plots.py's figure `name` of `args` (matplotlib is imported on the first)."""
    if name not in FIGURES:
        raise ValueError(f"no figure named {name!r}")
    from tailrace.analysis.report import plots

    return getattr(plots, name)(*args)


class Figures:
    """Figures by name (FIGURES) and arguments. `submit` says a figure's arguments are ready; `svg` returns the
    figure (an SVG string, or None when there is nothing to draw), the submitted one if any, else drawn of
    `args()`; `close` ends it. `ahead`: submitted figures are drawn before they are asked for, so their
    arguments are worth computing early."""

    ahead = False

    def submit(self, name: str, *args) -> None:
        """Figure `name`'s arguments are ready (nothing to do where figures are drawn when asked for)."""

    def svg(self, name: str, args: Callable[[], tuple]) -> str | None:
        raise NotImplementedError

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until whatever draws the figures has done its imports (True), or `timeout_s` passed (False)."""
        return True

    def close(self) -> None:
        """No figure is asked for after this."""

    def stop_now(self) -> None:
        """Stop at once, nothing more drawn (the process that owns it is about to exit)."""


class InlineFigures(Figures):
    """Draws each figure in this process when the report asks for it."""

    def svg(self, name: str, args: Callable[[], tuple]) -> str | None:
        return draw(name, *args())


class ProcessFigures(Figures):
    """Draws the submitted figures in a child process: `python -m tailrace.analysis.report.figures FD`, FD its end of a socket
    pair. It is started at once and stopped by `close`: asked to exit, killed by PID if it does not within
    STOP_TIMEOUT_S or never answered; it also exits by itself when this process goes away (its socket closes)."""

    ahead = True

    def __init__(self) -> None:
        mine, theirs = socket.socketpair()
        try:  # a fresh interpreter running this module: multiprocessing's spawn would import the caller's __main__
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tailrace.analysis.report.figures", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self._conn = Connection(mine.detach())
        self._submitted: dict[str, tuple] = {}  # by name, the arguments: drawn here if the child hands it back
        self._split = False
        self._here: dict[str, str | None] = {}  # figures handed back and drawn here, not yet asked for
        self.drawn_here = 0
        self._inline = InlineFigures()
        self._broken = False
        self._answered = 0

    @property
    def pid(self) -> int:
        return self._process.pid

    def submit(self, name: str, *args) -> None:
        if self._broken:
            return
        try:
            self._conn.send((DRAW, name, args))
            self._submitted[name] = args
        except Exception as exc:  # noqa: BLE001 — a closed socket, an argument that does not pickle
            self._give_up(exc)

    def svg(self, name: str, args: Callable[[], tuple]) -> str | None:
        if not self._split:  # the report is asked for: the statistics are done and this process' core is free
            self._split = True
            self._draw_handed_back()
        if name in self._here:
            return self._here.pop(name)
        if not self._broken and name not in self._submitted:
            self.submit(name, *args())
        if not self._broken:
            try:
                self._submitted.pop(name, None)  # the child forgets it too: the same name may be drawn again
                drawn, error = self._ask((GET, name, ()))
                if error is None:
                    return drawn
                log.debug("figure %s was not drawn by the figure process (%s): drawn here", name, error)
            except (OSError, EOFError, ValueError) as exc:
                self._give_up(exc)
        return self._inline.svg(name, args)

    def _ask(self, message: tuple):
        """Send `message`, return the child's answer (TimeoutError where none comes in ANSWER_TIMEOUT_S)."""
        self._conn.send(message)
        if not self._conn.poll(ANSWER_TIMEOUT_S):
            raise TimeoutError(f"no answer to {message[0]} {message[1]} in {ANSWER_TIMEOUT_S:g} s")
        answer = self._conn.recv()
        self._answered += 1
        return answer

    def _draw_handed_back(self) -> None:
        """Take from the child the waiting figures this process draws sooner (SPLIT) and draw them now, of the
        arguments they were submitted with, while the child draws the others. One that fails here is asked for
        like any other and drawn again then, where it raises as InlineFigures' would."""
        if self._broken or not self._submitted:
            return
        try:
            names = self._ask((SPLIT, "", (PLOTS in sys.modules,)))
        except (OSError, EOFError, ValueError) as exc:
            self._give_up(exc)
            return
        for name in names:
            args = self._submitted[name]
            try:
                self._here[name] = draw(name, *args)
            except Exception as exc:  # noqa: BLE001 — drawn again where the report asks for it
                log.debug("figure %s failed here (%s): drawn again when asked for", name, exc)
                continue
            del self._submitted[name]
            self.drawn_here += 1

    def wait_ready(self, timeout_s: float) -> bool:
        """One GET of a name never submitted: the child answers it once its imports are done (a run's load must
        not start while matplotlib is imported on the other core)."""
        if self._broken:
            return False
        try:
            self._conn.send((GET, READY_PROBE, ()))
            if not self._conn.poll(timeout_s):
                self._give_up(TimeoutError(f"the figure process was not ready in {timeout_s:g} s"))
                return False
            self._conn.recv()
            self._answered += 1
            return True
        except (OSError, EOFError, ValueError) as exc:
            self._give_up(exc)
            return False

    def _give_up(self, exc: BaseException) -> None:
        log.debug("figure process given up (%s): figures are drawn here", exc)
        self._broken = True

    def stop_now(self) -> None:
        """Kill the child by PID and reap it (from a signal handler: no message, no wait for an answer)."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        if not self._broken:
            try:
                self._conn.send((STOP, "", ()))
            except OSError:
                pass
        self._conn.close()  # a child still drawing reads the end of its socket next and exits
        if self._answered:  # it is in its loop: it exits on STOP
            try:
                self._process.wait(timeout=STOP_TIMEOUT_S)
                return
            except subprocess.TimeoutExpired:
                pass
        self._process.kill()  # never answered (still importing, say: an analysis that failed early) or hung
        self._process.wait()


def start_figures() -> Figures:
    """ProcessFigures, or InlineFigures where no process can be started."""
    try:
        return ProcessFigures()
    except OSError as exc:
        log.debug("no figure process (%s): figures are drawn here", exc)
        return InlineFigures()


class _Board:
    """The figure process' work: the figures submitted and not begun (in order; one asked for goes first), the one
    being drawn, those drawn and not yet asked for, and those asked for and waited on. A thread of its own reads the
    messages, so that SPLIT is answered while a figure is drawn."""

    def __init__(self, conn: Connection, failed: str | None) -> None:
        self.conn, self.failed = conn, failed
        self.changed = threading.Condition()
        self.pending: dict[str, tuple] = {}
        self.drawing: str | None = None
        self.drawn: dict[str, tuple[str | None, str | None]] = {}
        self.asked: set[str] = set()
        self.done = False
        self._sending = threading.Lock()

    def answer(self, reply) -> None:
        with self._sending:
            self.conn.send(reply)

    def read(self) -> None:
        """The message thread, until STOP or the analysing process is gone (its socket closes)."""
        while True:
            try:
                kind, name, args = self.conn.recv()
            except (EOFError, OSError):
                kind, name, args = STOP, "", ()
            with self.changed:
                if kind == STOP:
                    self.done = True
                    self.changed.notify_all()
                    return
                if kind == DRAW:
                    self.drawn.pop(name, None)
                    self.pending.pop(name, None)
                    self.pending[name] = args
                    self.changed.notify_all()
                elif kind == GET:
                    self._get(name)
                elif kind == SPLIT:
                    self.answer(self._hand_back(bool(args and args[0])))

    def _get(self, name: str) -> None:
        if name in self.drawn:
            self.answer(self.drawn.pop(name))
        elif name in self.pending or name == self.drawing:
            self.asked.add(name)
            if name in self.pending:  # drawn next: the report waits for it
                self.pending = {name: self.pending.pop(name), **self.pending}
        else:
            self.answer((None, self.failed or "not submitted"))

    def _hand_back(self, asker_has_plots: bool) -> list[str]:
        """The last waiting figures, dropped here: what the asker draws while this process draws the others — half
        of them, less IMPORT_FIGURES where the asker must import matplotlib first (none where this process could
        not import it: the asker draws every figure then)."""
        if self.failed is not None:
            return []
        ahead = 1 if self.drawing is not None else 0  # the one being drawn is this process' share too
        share = (len(self.pending) + ahead - (0 if asker_has_plots else IMPORT_FIGURES)) // 2
        names = list(self.pending)[len(self.pending) - max(0, min(share, len(self.pending))):]
        for name in names:
            del self.pending[name]
        return names

    def draw_all(self) -> None:
        """Draw the waiting figures in order, each answered if asked for, else kept, until STOP."""
        while True:
            with self.changed:
                while not self.pending and not self.done:
                    self.changed.wait()
                if self.done:
                    return
                name = next(iter(self.pending))
                args = self.pending.pop(name)
                self.drawing = name
            result: tuple[str | None, str | None] = (None, self.failed)
            if self.failed is None:
                try:
                    result = (draw(name, *args), None)
                except Exception as exc:  # noqa: BLE001 — drawn again by the caller, where it raises as it would
                    result = (None, f"{type(exc).__name__}: {exc}")
            with self.changed:
                self.drawing = None
                if name in self.pending:  # submitted again meanwhile: the new arguments' figure is the one
                    continue
                if name in self.asked:
                    self.asked.discard(name)
                    self.answer(result)
                else:
                    self.drawn[name] = result


def serve(conn: Connection) -> None:
    """The figure process: draw each DRAW in order; answer each GET with (svg, None) or (None, error), and SPLIT
    with the names it hands back."""
    try:
        from tailrace.analysis.report import plots  # noqa: F401 — imported before the first figure is needed
    except Exception as exc:  # noqa: BLE001 — every GET says why; the analysing process draws them itself
        failed: str | None = f"{type(exc).__name__}: {exc}"
    else:
        failed = None
    board = _Board(conn, failed)
    threading.Thread(target=board.read, name="figure-messages", daemon=True).start()
    board.draw_all()


if __name__ == "__main__":
    try:
        serve(Connection(int(sys.argv[1])))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the analysing process reports it
        pass
    # nothing to flush or close (no output, the socket is done): no interpreter teardown, which takes ~0.2 s
    # with matplotlib and pandas loaded and would keep `tailrace analyze` waiting in close()
    os._exit(0)
