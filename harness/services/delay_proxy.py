"""A userspace TCP proxy that adds one-way delay and jitter in each direction (no netem here).

Every chunk read from one side is written to the other side `delay ± jitter` later; release times
never go backwards within a direction, so the byte stream keeps its order (as on a real path, jitter
shows up as bunching, not reordering).
"""
from __future__ import annotations

import asyncio
import random
import sys
import time

from tailrace.contract.exit_codes import OK
from tailrace.contract.internal_processes import DELAY_PROXY, ListenError, ProxyOptions, ProxyRoute, options_from_argv


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


async def _serve_route(route: ProxyRoute, link_up: DelayLink, link_down: DelayLink) -> asyncio.AbstractServer:
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

    try:
        return await asyncio.start_server(handle, route.listen_host, route.listen_port, backlog=4096)
    except OSError as exc:
        raise ListenError(route.listen_host, route.listen_port, exc) from None


async def run_proxy(options: ProxyOptions) -> None:
    """Serve every route until cancelled."""
    seed = options.seed
    servers = [await _serve_route(r, DelayLink(options.delay_ms, options.jitter_ms, seed),
                                  DelayLink(options.delay_ms, options.jitter_ms, seed + 1)) for r in options.routes]
    print("tailrace proxy: " + ", ".join(str(r) for r in options.routes)
          + f" delay {options.delay_ms} ms ± {options.jitter_ms} ms", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main_proxy(options: ProxyOptions) -> int:
    """Serve `options` until stopped (`tailrace proxy`, and a run's region proxies)."""
    import uvloop

    uvloop.run(run_proxy(options))
    return OK


def main(argv: list[str]) -> int:
    """A region's proxy as a run starts it: `python -m tailrace.harness.services.delay_proxy OPTIONS_JSON`."""
    return main_proxy(options_from_argv(ProxyOptions, argv, DELAY_PROXY))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
