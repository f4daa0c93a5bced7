"""A userspace TCP proxy that adds one-way delay and jitter in each direction (no netem here).

Every chunk read from one side is written to the other side `delay ± jitter` later; release times
never go backwards within a direction, so the byte stream keeps its order (as on a real path, jitter
shows up as bunching, not reordering).
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from tailrace.contract.exit_codes import OK


@dataclass(frozen=True)
class Route:
    listen_host: str
    listen_port: int
    target_host: str
    target_port: int

    @classmethod
    def parse(cls, text: str) -> "Route":
        """'LHOST:LPORT=THOST:TPORT'."""
        try:
            listen, target = text.split("=")
            lh, lp = listen.rsplit(":", 1)
            th, tp = target.rsplit(":", 1)
            return cls(lh, int(lp), th, int(tp))
        except ValueError:
            raise ValueError(f"route must be LISTEN_HOST:PORT=TARGET_HOST:PORT, got {text!r}") from None


class DelayLink:
    """Delay model of one region's path."""

    def __init__(self, delay_ms: float, jitter_ms: float, seed: int = 0) -> None:
        self.delay_s = delay_ms / 1000
        self.jitter_s = jitter_ms / 1000
        self._rng = random.Random(seed)

    def sample(self) -> float:
        if self.jitter_s <= 0:
            return self.delay_s
        return max(0.0, self.delay_s + self._rng.uniform(-self.jitter_s, self.jitter_s))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: DelayLink) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def delayed_writer() -> None:
        while True:
            release, data = await queue.get()
            if data is None:
                break
            wait = release - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(delayed_writer())
    last = 0.0
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            last = max(time.monotonic() + link.sample(), last)
            queue.put_nowait((last, data))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((last, None))
        try:
            await task
        except (ConnectionError, OSError):
            pass
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def _serve_route(route: Route, link_up: DelayLink, link_down: DelayLink) -> asyncio.AbstractServer:
    async def handle(client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(route.target_host, route.target_port)
        except OSError:
            client_writer.close()
            return
        for w in (client_writer, server_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(client_reader, server_writer, link_up), _pipe(server_reader, client_writer, link_down))

    return await asyncio.start_server(handle, route.listen_host, route.listen_port, backlog=4096)


async def run_proxy(routes: list[Route], delay_ms: float, jitter_ms: float, seed: int = 0) -> None:
    """Serve every route until cancelled."""
    servers = [await _serve_route(r, DelayLink(delay_ms, jitter_ms, seed), DelayLink(delay_ms, jitter_ms, seed + 1))
               for r in routes]
    print("tailrace proxy: " + ", ".join(f"{r.listen_host}:{r.listen_port}->{r.target_host}:{r.target_port}"
                                         for r in routes) + f" delay {delay_ms} ms ± {jitter_ms} ms", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main_proxy(routes: list[str], delay_ms: float, jitter_ms: float, seed: int) -> int:
    """Entry point for `tailrace proxy`."""
    import uvloop

    parsed = [Route.parse(r) for r in routes]
    uvloop.run(run_proxy(parsed, delay_ms, jitter_ms, seed))
    return OK
