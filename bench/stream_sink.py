"""A streaming sink: an OpenAI-compatible server that streams tokens at instants it records, to measure a client's
token timestamps against the truth (tests/integration/harness/client/test_generative_client.py; the stream-fidelity benchmark).

Each POST to /v1/completions or /v1/chat/completions is answered with server-sent events (chunked): the first token
`--first-ms` after the request arrived, then one event every `--gap-ms`, every third event carrying two tokens,
with usage on every event (vLLM's continuous_usage_stats), a finish event, the usage trailer and [DONE]. Every
event's write instant (perf_counter_ns: CLOCK_MONOTONIC, the same clock as a client on this host; and the wall
clock, with the request's arrival, for clients that stamp epoch time) is appended to `--log` as JSON lines with the
request's trace ID (else the "req-<n>" its prompt carries, else "arrival-<ns>").

The prompt picks a fault: "mode:cut" (the connection closes after two events), "mode:error" (an error event in the
200 stream), "mode:slow" (the first token after 2 s), "mode:malformed" (an event that is not JSON), "mode:busy"
(429 with an error body), "mode:agent" (chat: three reasoning_content deltas, then a tool call in two deltas, then the
answer). The first event's log line carries the request's message roles. GET /v1/models lists the
model "sink", GET /health answers 200; any other GET is 404.

    python bench/stream_sink.py --port P --log FILE [--first-ms 50] [--gap-ms 20] [--tokens 20]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

TRACE = re.compile(rb"traceparent: 00-([0-9a-f]{32})-", re.I)
KEY = re.compile(rb"req-\d+")  # a prompt's own key, for clients that send no traceparent (a peer tool)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(obj) -> bytes:
    return chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")


class Sink:
    def __init__(self, log_path: str, first_ms: float, gap_ms: float, tokens: int) -> None:
        self.log = open(log_path, "a")  # buffered: flushed once a stream ends (a write per event costs the sink)
        self.first_s, self.gap_s, self.tokens = first_ms / 1000, gap_ms / 1000, tokens

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived, arrived_wall_ns = time.perf_counter(), time.time_ns()
                length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1)) if b"ontent-" in head else 0
                body = await reader.readexactly(length) if length else b""
                if head.startswith(b"GET /health "):  # vLLM's health route (guidellm asks it first)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if head.startswith(b"GET ") and not head.startswith(b"GET /v1/models "):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if head.startswith(b"GET /v1/models"):
                    payload = json.dumps({"object": "list", "data": [{"id": "sink", "object": "model"}]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(payload) + payload)
                    await writer.drain()
                    continue
                trace, key = TRACE.search(head), KEY.search(body)
                await self.stream(writer, json.loads(body or b"{}"), arrived, trace.group(1).decode() if trace
                                  else key.group(0).decode() if key else f"arrival-{arrived_wall_ns}",
                                  arrived_wall_ns)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(self, writer: asyncio.StreamWriter, request: dict, arrived: float, trace: str,
                     arrived_wall_ns: int = 0) -> None:
        chat = "messages" in request
        text = json.dumps(request.get("messages") or request.get("prompt") or "")
        mode = re.search(r"mode:(\w+)", text)
        mode = mode.group(1) if mode else ""
        if mode == "busy":  # refused, as vLLM refuses when its waiting queue is full
            payload = json.dumps({"error": {"message": "sink: too many requests", "code": 429}}).encode()
            writer.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     b"Cache-Control: no-cache\r\n\r\n")
        if chat:  # the role event, no token
            writer.write(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        await writer.drain()
        sent, k, due = 0, 0, arrived + (2.0 if mode == "slow" else self.first_s)
        while sent < self.tokens:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            n = min(2 if k % 3 == 2 else 1, self.tokens - sent)
            sent += n
            piece = " tok" * n
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            if mode == "agent" and chat and k < 3:
                choice = {"index": 0, "delta": {"reasoning_content": piece}}
            elif mode == "agent" and chat and k < 5:
                call = {"index": 0, "function": {"arguments": "{\"q\": 1}" if k == 4 else ""}}
                if k == 3:
                    call.update({"id": f"call_{trace[-6:]}", "type": "function", "function": {"name": "lookup"}})
                choice = {"index": 0, "delta": {"tool_calls": [call]}}
            payload = {"choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": sent}}
            written_ns = time.perf_counter_ns()  # transport.write sends at once when nothing waits before it
            wall_ns = time.time_ns()  # for clients that stamp the wall clock (a peer tool's epoch seconds)
            if mode == "malformed" and k == 1:
                writer.write(event(b"{not json"))
            elif mode == "error" and k == 2:
                writer.write(event({"error": {"message": "sink: out of memory", "code": 500}}))
            else:
                writer.write(event(payload))
            await writer.drain()
            line = {"trace_id": trace, "event": k, "tokens": n, "t_ns": written_ns, "wall_ns": wall_ns,
                    "arrived_wall_ns": arrived_wall_ns}
            if k == 0 and chat:
                line["roles"] = [m.get("role") for m in request.get("messages") or []]
            self.log.write(json.dumps(line) + "\n")
            if mode == "cut" and k == 1:
                self.log.flush()
                writer.transport.abort()
                raise ConnectionError("cut on purpose")
            if mode in ("error", "malformed") and k == 2:
                self.log.flush()
                break
            k += 1
            due += self.gap_s
        finish = {"index": 0, "delta": {}, "finish_reason": "length"} if chat else \
            {"index": 0, "text": "", "finish_reason": "length"}
        writer.write(event({"choices": [finish], "usage": {"prompt_tokens": 7, "completion_tokens": sent}}))
        writer.write(event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": sent}}))
        writer.write(event(b"[DONE]") + b"0\r\n\r\n")
        await writer.drain()
        self.log.flush()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--first-ms", type=float, default=50)
    ap.add_argument("--gap-ms", type=float, default=20)
    ap.add_argument("--tokens", type=int, default=20)
    args = ap.parse_args()
    sink = Sink(args.log, args.first_ms, args.gap_ms, args.tokens)
    server = await asyncio.start_server(sink.handle, args.host, args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop  # the sink's own cost per event, low: it must keep up with thousands of streams

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
