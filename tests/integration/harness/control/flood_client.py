"""A flood of wrong workers for the admission test: N connections to a master's control port, each a Locust
client that says client_ready and then JOINs with a wrong token proof, waits for its REFUSED and closes.

python -m tests.integration.harness.control.flood_client HOST PORT N  → prints how many were refused."""
from __future__ import annotations

import sys
import uuid

from locust import __version__
from locust.exception import RPCError
from locust.rpc import Message, zmqrpc

from tailrace.contract import messages

HOST_NAME = "flood-host"  # the address the master counts these refusals under


def one(host: str, port: int) -> bool:
    """One wrong worker: True when the master refused it."""
    identity = f"{HOST_NAME}_{uuid.uuid4().hex}"
    client = zmqrpc.Client(host, port, identity)
    client.socket.setsockopt(zmqrpc.zmq.RCVTIMEO, 10_000)  # a master that never answers: not refused
    try:
        client.send(Message("client_ready", __version__, identity))
        join = messages.Join(identity, "r1-w0", "r1", 0, "0" * 64, messages.PROTOCOL_VERSION, "")
        client.send(Message(messages.JOIN.name, messages.wire(join), identity))
        for _ in range(20):  # ack, then REFUSED (heartbeats are never sent to it: it is not a worker)
            msg = client.recv()
            if msg.type == messages.REFUSED.name:
                return True
        return False
    except RPCError:
        return False
    finally:
        client.close(linger=0)
        client.socket.context.term()


def main() -> int:
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    refused = sum(one(host, port) for _ in range(n))
    print(f"refused {refused} of {n}", flush=True)
    return 0 if refused == n else 1


if __name__ == "__main__":
    sys.exit(main())
