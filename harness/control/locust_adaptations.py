"""Every place tailrace reaches into Locust's internals, in one module.

Checked against Locust 2.30–2.47 (pyproject.toml bounds `locust` to these releases); `missing_internals()` names
any of them a Locust release lacks, and tests/unit/repository/test_install.py runs it against the installed one.

- The control channel's sockets (`locust.rpc.zmqrpc.BaseSocket`): ZMTP heartbeats, fast reconnects and the
  master's identity handover, for a link over a WAN.
- The master's silence a worker tolerates (`runners.MASTER_HEARTBEAT_TIMEOUT`, and the runner's
  `last_heartbeat_timestamp`), and a worker's silence the master tolerates (`runners.HEARTBEAT_LIVENESS`, counted
  down in each client's `heartbeat`).
- Forgetting a refused worker at once (`MasterRunner.clients`, `_users_dispatcher.remove_worker`).
- The master's two fixed waits that tailrace has no use for: `MasterRunner.quit` sleeps 0.5 s for the workers'
  final Locust statistics (tailrace's own results are in by then: DONE), twice per shutdown; the headless start polls
  for the expected workers once a second (`locust.main`'s `time.sleep(1)`). Each run paid ~1.5 s for them.
"""
from __future__ import annotations

import math
import time

import gevent
from locust import main as locust_main
from locust import runners as locust_runners
from locust.rpc import Message, zmqrpc

from tailrace.contract.profile import Generator

# The control channel over a WAN. A link that drops every packet for a while leaves a TCP connection waiting on its
# retransmission backoff (0.2, 0.6, 1.4 … 12.6, 25.4 s): a 15 s cut measured as 27 s of silence. ZMTP heartbeats
# declare a connection dead after ZMQ_DEAD_MS without traffic; the worker's socket then reconnects every
# ZMQ_RECONNECT_MS with a fresh connection (sent within that of the link's return), and the master hands the
# worker's identity over to it (ROUTER_HANDOVER). What the dead connection held is re-sent: heartbeats by Locust,
# chunks by the uplink (harness/spool/uplink.py) once unacknowledged.
ZMQ_HEARTBEAT_MS, ZMQ_DEAD_MS, ZMQ_RECONNECT_MS = 1000, 4000, 1000
# Until a plan says otherwise: the profile's default generator.master_timeout_s (Locust's own default is 60 s).
DEFAULT_MASTER_TIMEOUT_S = float(Generator.model_fields["master_timeout_s"].default)

_locust_socket_init = zmqrpc.BaseSocket.__init__
_LOCUST_QUIT = locust_runners.MasterRunner.quit


def _wan_socket_init(self, sock_type, ipv4_only) -> None:
    _locust_socket_init(self, sock_type, ipv4_only)
    self.socket.setsockopt(zmqrpc.zmq.HEARTBEAT_IVL, ZMQ_HEARTBEAT_MS)
    self.socket.setsockopt(zmqrpc.zmq.HEARTBEAT_TIMEOUT, ZMQ_DEAD_MS)
    self.socket.setsockopt(zmqrpc.zmq.RECONNECT_IVL_MAX, ZMQ_RECONNECT_MS)
    if sock_type == zmqrpc.zmq.ROUTER:
        self.socket.setsockopt(zmqrpc.zmq.ROUTER_HANDOVER, 1)


QUIT_FLUSH_S = 0.1  # the master's quit: time for its "quit" messages to leave before its sockets close
WORKERS_POLL_S = 0.05  # the headless master's look for its expected workers (Locust: 1 s)


def _quit_without_stats_wait(self) -> None:
    """`MasterRunner.quit` as Locust has it (2.30–2.47), without its 0.5 s wait for final statistics."""
    self.stop(send_stop_to_client=False)
    for client in self.clients.all:
        self.server.send_to_client(Message("quit", None, client.id))
    gevent.sleep(QUIT_FLUSH_S)
    self.greenlet.kill(block=True)


class _PollingTime:
    """`locust.main`'s `time`, whose one `time.sleep(1)` is its headless wait for the expected workers."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(WORKERS_POLL_S if seconds == 1 else seconds)


def adapt_locust() -> None:
    """Install the adaptations every tailrace process needs before Locust opens its sockets (idempotent)."""
    zmqrpc.BaseSocket.__init__ = _wan_socket_init
    set_master_timeout(DEFAULT_MASTER_TIMEOUT_S)
    locust_runners.MasterRunner.quit = _quit_without_stats_wait
    locust_main.time = _PollingTime()


# -- a worker: how long it waits for a silent master ----------------------------------------------------------------
def set_master_timeout(seconds: float) -> None:
    locust_runners.MASTER_HEARTBEAT_TIMEOUT = seconds


def master_timeout() -> float:
    return locust_runners.MASTER_HEARTBEAT_TIMEOUT


def last_master_heartbeat(runner) -> float | None:
    """When (epoch s) the worker last heard the master; None before the first heartbeat."""
    return getattr(runner, "last_heartbeat_timestamp", None) or None


def master_lost(runner) -> bool:
    """The master has been silent for (almost) the whole timeout: the worker stops."""
    last = last_master_heartbeat(runner)
    return last is not None and time.time() - last > master_timeout() - 1


# -- the master: how long it waits for a silent worker --------------------------------------------------------------
def set_worker_liveness(seconds: float) -> None:
    """A worker is "missing" (and, if it was the last, Locust stops the test) after this many silent seconds."""
    locust_runners.HEARTBEAT_LIVENESS = max(3, math.ceil(seconds))


def worker_quiet_s(client) -> float:
    """How long a worker has been silent: Locust counts its `heartbeat` down from the liveness once a second."""
    return locust_runners.HEARTBEAT_LIVENESS - client.heartbeat


def forget_worker(runner, client_id: str) -> None:
    """Drop a (refused) worker at once: it takes no user and is not counted among the expected workers (a Locust
    "quit" would make a master whose only connected worker it was stop the whole run)."""
    client = runner.clients.get(client_id)
    if client is not None:
        del runner.clients[client_id]
        if runner._users_dispatcher is not None:
            runner._users_dispatcher.remove_worker(client)


def missing_internals() -> list[str]:
    """The Locust internals above that the installed Locust lacks (empty: all there)."""
    from locust.dispatch import UsersDispatcher
    from locust.runners import MasterRunner, WorkerRunner

    def names(cls) -> set[str]:  # attributes, and those its __init__ methods assign
        return set(dir(cls)).union(*(c.__init__.__code__.co_names for c in cls.__mro__
                                     if getattr(getattr(c, "__init__", None), "__code__", None)))

    wanted = {"runners.MASTER_HEARTBEAT_TIMEOUT": hasattr(locust_runners, "MASTER_HEARTBEAT_TIMEOUT"),
              "runners.HEARTBEAT_LIVENESS": hasattr(locust_runners, "HEARTBEAT_LIVENESS"),
              "zmqrpc.BaseSocket.__init__(sock_type, ipv4_only)":
                  _locust_socket_init.__code__.co_varnames[1:3] == ("sock_type", "ipv4_only"),
              "UsersDispatcher.remove_worker": hasattr(UsersDispatcher, "remove_worker"),
              "main.time (the headless wait for workers)": getattr(locust_main, "time", None) is not None,
              "MasterRunner.quit (stop, clients.all, server.send_to_client, greenlet)":
                  {"stop", "clients", "server", "greenlet"} <= set(_LOCUST_QUIT.__code__.co_names)}
    for cls, attrs in ((MasterRunner, ("register_message", "send_message", "clients", "_users_dispatcher")),
                       (WorkerRunner, ("register_message", "send_message", "client_id", "last_heartbeat_timestamp"))):
        for attr in attrs:
            wanted[f"{cls.__name__}.{attr}"] = attr in names(cls)
    return sorted(name for name, ok in wanted.items() if not ok)
