"""Every place tailrace reaches into Locust's internals, in one module.

Checked against Locust 2.43–2.47 (pyproject.toml bounds `locust` to these releases); `missing_internals()` names
any of them a Locust release lacks, and tests/unit/repository/test_install.py runs it against the installed one.

- The control channel's sockets (`locust.rpc.zmqrpc.BaseSocket`): ZMTP heartbeats, fast reconnects and the
  master's identity handover, for a link over a WAN.
- The master's silence a worker tolerates (`runners.MASTER_HEARTBEAT_TIMEOUT`, and the runner's
  `last_heartbeat_timestamp`), and a worker's silence the master tolerates (`runners.HEARTBEAT_LIVENESS`, counted
  down in each client's `heartbeat`).
- Admission before a place: the master holds a worker that has connected (Locust's `client_ready`, acknowledged as
  Locust does) out of `MasterRunner.clients` until its JOIN is admitted, so that one that fails authentication is
  never counted among the expected workers nor given a user (`MasterRunner.handle_message`, `WorkerNode`,
  `_users_dispatcher.add_worker`); forgetting a refused worker at once (`remove_worker`).
- A worker's wait for its master (`Environment.create_worker_runner`, Locust's connect loop): a Ctrl-C during it
  ends the worker with one line and exit 130, not gevent's "KeyboardInterrupt" printout and exit 1; a master that
  never answers, with one line naming the address, exit 2, not Locust's blank "Failed to connect" and exit 255.
- The master's two fixed waits that tailrace has no use for: `MasterRunner.quit` sleeps 0.5 s for the workers'
  final Locust statistics (tailrace's own results are in by then: DONE), twice per shutdown; the headless start polls
  for the expected workers once a second (`locust.main`'s `time.sleep(1)`). Each run paid ~1.5 s for them.
"""
from __future__ import annotations

import math
import sys
import time

import gevent
from locust import main as locust_main
from locust import runners as locust_runners
from locust.env import Environment
from locust.rpc import Message, zmqrpc

from tailrace.contract.exit_codes import INTERRUPTED, USAGE
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
_LOCUST_HANDLE_MESSAGE = locust_runners.MasterRunner.handle_message
_LOCUST_CREATE_WORKER = Environment.create_worker_runner
MAX_HELD = 1024  # workers connected and not yet admitted that the master remembers (the oldest are forgotten)


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
    """`MasterRunner.quit` as Locust has it (2.43–2.47), without its 0.5 s wait for final statistics."""
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


def _admission_first(self, client_id: str, msg: Message) -> None:
    """`MasterRunner.handle_message`, holding a connecting worker that is not admitted yet out of `clients`: it is
    acknowledged (so that it goes on to send its JOIN) and announced (worker_connect), as Locust does, but Locust
    neither counts it among the workers it waits for nor gives it a user until admit_worker."""
    admitted = getattr(self, "tailrace_admitted", None)
    if admitted is None or msg.type != "client_ready" or not msg.data or admitted(client_id):
        _LOCUST_HANDLE_MESSAGE(self, client_id, msg)
        return
    held = self.tailrace_held
    held.pop(client_id, None)
    held[client_id] = time.monotonic()
    while len(held) > MAX_HELD:
        del held[next(iter(held))]
    self.send_message("ack", client_id=client_id, data={"index": self.get_worker_index(client_id)})
    self.environment.events.worker_connect.fire(client_id=msg.node_id)


def hold_until_admitted(runner, admitted) -> None:
    """From now on the master `runner` holds each connecting worker for which `admitted(client_id)` is false."""
    runner.tailrace_held = {}
    runner.tailrace_admitted = admitted


def admit_worker(runner, client_id: str) -> None:
    """A held worker's JOIN was admitted: it joins Locust's workers as Locust's own `client_ready` would make it
    join (counted, given a user once the test starts or, when it is running, at once)."""
    runner.tailrace_held.pop(client_id, None)
    if client_id in runner.clients:
        return
    runner.clients[client_id] = locust_runners.WorkerNode(client_id,
                                                          heartbeat_liveness=locust_runners.HEARTBEAT_LIVENESS)
    dispatcher = runner._users_dispatcher
    if dispatcher is not None:
        dispatcher.add_worker(worker_node=runner.clients[client_id])
        if not dispatcher.dispatch_in_progress and runner.state == locust_runners.STATE_RUNNING:
            runner.start(runner.target_user_count, runner.spawn_rate)


def _joining_worker(self, master_host: str, master_port: int):
    """`Environment.create_worker_runner`, which waits (Locust: 60 tries, 5 s each) until the master answers: ended by
    a Ctrl-C or by a master that never answers, one line says which and the worker exits — nothing was sent yet.
    Locust's own connect loop turns a Ctrl-C into exit 1 after the hub printed it: the hub counts it as no error here
    (it still reaches the loop), and the exit is 130."""
    hub = gevent.get_hub()
    not_error = hub.NOT_ERROR
    hub.NOT_ERROR = (*not_error, KeyboardInterrupt)
    where = f"{master_host}:{master_port}"
    try:
        return _LOCUST_CREATE_WORKER(self, master_host, master_port)
    except (KeyboardInterrupt, SystemExit):  # (Locust's loop exits 1 on the KeyboardInterrupt it caught)
        print(f"tailrace worker: interrupted before it reached its master at {where}; nothing was sent",
              file=sys.stderr, flush=True)
        sys.exit(INTERRUPTED)
    except OSError:  # Locust's ConnectionError, after its last try
        waited = locust_runners.CONNECT_TIMEOUT * (locust_runners.CONNECT_RETRY_COUNT + 1)
        print(f"tailrace worker: no master answered at {where} in {waited:.0f} s (--master: is `tailrace master` "
              "running there, and its port reachable from this host?); nothing was sent", file=sys.stderr, flush=True)
        sys.exit(USAGE)
    finally:
        hub.NOT_ERROR = not_error


def adapt_locust() -> None:
    """Install the adaptations every tailrace process needs before Locust opens its sockets (idempotent)."""
    zmqrpc.BaseSocket.__init__ = _wan_socket_init
    set_master_timeout(DEFAULT_MASTER_TIMEOUT_S)
    locust_runners.MasterRunner.quit = _quit_without_stats_wait
    locust_runners.MasterRunner.handle_message = _admission_first
    locust_main.time = _PollingTime()
    Environment.create_worker_runner = _joining_worker


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
    getattr(runner, "tailrace_held", {}).pop(client_id, None)
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
              "UsersDispatcher.add_worker": hasattr(UsersDispatcher, "add_worker"),
              "MasterRunner.handle_message": hasattr(MasterRunner, "handle_message"),
              "MasterRunner.get_worker_index": hasattr(MasterRunner, "get_worker_index"),
              "main.time (the headless wait for workers)": getattr(locust_main, "time", None) is not None,
              "runners.CONNECT_TIMEOUT, CONNECT_RETRY_COUNT": hasattr(locust_runners, "CONNECT_TIMEOUT")
                                                               and hasattr(locust_runners, "CONNECT_RETRY_COUNT"),
              "Environment.create_worker_runner(master_host, master_port)":
                  _LOCUST_CREATE_WORKER.__code__.co_varnames[1:3] == ("master_host", "master_port"),
              "MasterRunner.quit (stop, clients.all, server.send_to_client, greenlet)":
                  {"stop", "clients", "server", "greenlet"} <= set(_LOCUST_QUIT.__code__.co_names)}
    for cls, attrs in ((MasterRunner, ("register_message", "send_message", "clients", "_users_dispatcher")),
                       (WorkerRunner, ("register_message", "send_message", "client_id", "last_heartbeat_timestamp"))):
        for attr in attrs:
            wanted[f"{cls.__name__}.{attr}"] = attr in names(cls)
    return sorted(name for name, ok in wanted.items() if not ok)
