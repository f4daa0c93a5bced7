"""The live page of a run, served by `tailrace run` / `tailrace master` while it runs and until its report is written.

The page is one static file (live_static/live.html, with the vendored uPlot) and a server-sent-events feed,
`/events`: every line of master-events.jsonl and of live.jsonl (the master's aggregated state once a second,
harness/control/live_board.py) as an event named as in contract/master_events.py's catalogue, from the run's
beginning. One control: `POST /stop` ends the run as Ctrl-C does (interrupted: INVALID, every row already measured
kept, the report written); once the report is written the page fetches it (`/report`) and keeps a copy. A sweep
(`tailrace sweep`) keeps one page through its points: each point's run is attached in turn, a `sweep_point` event
says which point runs (the page reloads for the next one), the stop control ends the point and the sweep, and the
sweep's end and report close it. Bound to
loopback by default; bound anywhere else, every request must carry the run's token (`?token=`, `Authorization:
Bearer`, or the cookie the page sets when opened with it: HttpOnly, SameSite=Strict) or is refused with 401.
"""
from __future__ import annotations

import hmac
import json
import mimetypes
import threading
import time
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tailrace.contract import master_events
from tailrace.contract.layout import RunLayout
from tailrace.harness.services.processes import is_loopback

STATIC = Path(__file__).resolve().parent / "live_static"
STATIC_FILES = ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE")
POLL_S = 0.25  # how often a feed looks for new lines
KEEPALIVE_S = 10.0
FINAL_FLUSH_S = 3.0  # at the end, how long the server waits for open pages to receive the verdict and the report
OFF = "off"
COOKIE = "tailrace_live"  # the token, for the page's own requests (HttpOnly, SameSite=Strict)


def parse_bind(text: str) -> tuple[str, int] | None:
    """`HOST:PORT` (port 0: any free one) or `off` → (host, port) or None; ValueError names the flag."""
    if text == OFF:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--ui-bind {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8089, 0.0.0.0:0) or 'off'")
    return host.strip("[]"), int(port)


class LivePage:
    """The page's HTTP server (a thread of the orchestrating process) and the run it shows."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.token = host, token
        self.needs_token = not is_loopback(host)
        self.layout: RunLayout | None = None
        self.stop_requested = threading.Event()
        self.ended = threading.Event()
        self._feeds_open = 0
        self._feeds_done = 0
        self._reports_served = 0
        self._report: Path | None = None
        self._lock = threading.Lock()
        self.point: str | None = None  # a sweep's current point: its sweep_point event line
        self._generation = 0  # bumped at each point: a feed of the point before ends
        self._final: str | None = None  # a sweep's end: its run_ended line, sent from memory
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="live-page", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.needs_token else "")

    def attach(self, layout: RunLayout) -> None:
        """The run directory is known: its feed can start."""
        self.layout = layout

    def show_point(self, **point) -> None:
        """A sweep's next point starts (SWEEP_POINT's fields): open pages are told, then reload for its run."""
        line = json.dumps(master_events.SWEEP_POINT.record(time.time_ns(), **point))
        with self._lock:
            self.point, self.layout = line, None
            self._generation += 1

    def finish(self, verdict: str, exit_code: int, report: Path | None, record: bool = True) -> None:
        """The run is over and analysed: tell open pages (RUN_ENDED) and give them up to FINAL_FLUSH_S to receive it
        and to fetch the report (they keep a copy: the link works after this process has exited). `record`: the
        event is also appended to the run's master-events.jsonl (not for a sweep's end: no run's own)."""
        self._report = report
        if not record:
            self._final = json.dumps(master_events.RUN_ENDED.record(
                time.time_ns(), verdict=verdict, exit_code=exit_code, report=str(report) if report is not None else None))
        elif self.layout is not None:
            try:
                master_events.MasterEventLog(self.layout).write(
                    master_events.RUN_ENDED, verdict=verdict, exit_code=exit_code,
                    report=str(report) if report is not None else None)
            except OSError:
                pass
        self.ended.set()
        deadline = time.monotonic() + FINAL_FLUSH_S
        while time.monotonic() < deadline:
            with self._lock:
                if self._feeds_done >= self._feeds_open and (report is None or
                                                             self._reports_served >= self._feeds_open):
                    break
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- requests -----------------------------------------------------------------------------------------------------
    def authorized(self, path: str, headers) -> bool:
        if not self.needs_token:
            return True
        given = parse_qs(urlsplit(path).query).get("token", [""])[0]
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):]
        if not given:  # the page's own files and feed, after the page itself was opened with the token
            cookie = SimpleCookie(headers.get("Cookie", ""))
            given = cookie[COOKIE].value if COOKIE in cookie else ""
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def feed(self, write) -> None:
        """Every line of the run's logs as server-sent events, then new ones as they come, until RUN_ENDED."""
        with self._lock:
            self._feeds_open += 1
            generation, point = self._generation, self.point
        offsets: dict[Path, int] = {}
        last_write = time.monotonic()
        try:
            if point is not None:
                write(f"event: {master_events.SWEEP_POINT.name}\ndata: {point}\n\n".encode())
            while True:
                with self._lock:
                    layout, moved_on, point = self.layout, self._generation != generation, self.point
                if moved_on:  # a sweep's next point: the page reloads for it
                    write(f"event: {master_events.SWEEP_POINT.name}\ndata: {point}\n\n".encode())
                    return
                sent_end = False
                if layout is not None:
                    for path in (layout.master_events, layout.live):
                        for line in _new_lines(path, offsets):
                            name = _event_name(line)
                            if name is None:
                                continue
                            write(f"event: {name}\ndata: {line}\n\n".encode())
                            last_write = time.monotonic()
                            sent_end = sent_end or name == master_events.RUN_ENDED.name
                if sent_end:
                    return
                if self._final is not None:
                    write(f"event: {master_events.RUN_ENDED.name}\ndata: {self._final}\n\n".encode())
                    return
                if time.monotonic() - last_write > KEEPALIVE_S:
                    write(b": keep-alive\n\n")
                    last_write = time.monotonic()
                time.sleep(POLL_S)
        finally:
            with self._lock:
                self._feeds_done += 1

    def request_stop(self, by: str) -> bool:
        """The stop control: False when the run is already over."""
        if self.ended.is_set():
            return False
        if not self.stop_requested.is_set():
            self.stop_requested.set()
            if self.layout is not None:
                try:
                    master_events.MasterEventLog(self.layout).write(master_events.STOP_REQUESTED, by=by)
                except OSError:
                    pass
        return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        page = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "tailrace-live"

            def log_message(self, *_args) -> None:  # no access log on the terminal
                pass

            def _refuse(self, status: HTTPStatus, text: str) -> None:
                body = (text + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, path: Path, cookie: bool = False) -> None:
                body = path.read_bytes()
                self.send_response(HTTPStatus.OK)
                if cookie and page.needs_token:
                    self.send_header("Set-Cookie", f"{COOKIE}={page.token}; HttpOnly; SameSite=Strict; Path=/")
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                self.send_header("Content-Type", kind + ("; charset=utf-8" if kind.startswith("text/") or
                                                         kind.endswith("javascript") else ""))
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if not page.authorized(self.path, self.headers):
                    return self._refuse(HTTPStatus.UNAUTHORIZED, "this live page needs the run's token (?token=…)")
                route = urlsplit(self.path).path
                if route in ("/", "/live.html"):
                    return self._file(STATIC / "live.html", cookie=True)
                if route.startswith("/static/") and route[len("/static/"):] in STATIC_FILES:
                    return self._file(STATIC / route[len("/static/"):])
                if route == "/events":
                    return self._events()
                if route == "/report" and page._report is not None:
                    self._file(page._report)
                    with page._lock:
                        page._reports_served += 1
                    return None
                self._refuse(HTTPStatus.NOT_FOUND, "not found")

            def _events(self) -> None:
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.end_headers()

                def write(data: bytes) -> None:
                    self.wfile.write(data)
                    self.wfile.flush()

                try:
                    page.feed(write)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the page was closed

            def do_POST(self) -> None:  # noqa: N802
                if not page.authorized(self.path, self.headers):
                    return self._refuse(HTTPStatus.UNAUTHORIZED, "this live page needs the run's token (?token=…)")
                if urlsplit(self.path).path != "/stop":
                    return self._refuse(HTTPStatus.NOT_FOUND, "not found")
                # a JSON body: a page of another origin cannot send it without a preflight this server never answers
                if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                    return self._refuse(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "POST /stop with Content-Type: "
                                                                           "application/json")
                if page.request_stop(self.client_address[0]):
                    return self._refuse(HTTPStatus.ACCEPTED, "stopping the run")
                self._refuse(HTTPStatus.CONFLICT, "the run is already over")

        return Handler


def _new_lines(path: Path, offsets: dict[Path, int]) -> list[str]:
    """Whole lines appended to `path` since the last call (a torn last line waits for its end)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offsets.get(path, 0))
            data = fh.read()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n")
    if end < 0:
        return []
    offsets[path] = offsets.get(path, 0) + end + 1
    return [line for line in data[:end].decode("utf-8", "replace").split("\n") if line]


def _event_name(line: str) -> str | None:
    try:
        name = json.loads(line).get("event")
    except (json.JSONDecodeError, AttributeError):
        return None
    return name if name in master_events.CATALOGUE else None
