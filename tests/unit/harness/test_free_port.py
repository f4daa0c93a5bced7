"""free_port: a port for a process about to start, never one the kernel may hand to another process meanwhile."""
from __future__ import annotations

import socket

from tailrace.harness.services import processes
from tailrace.harness.services.processes import CHOSEN_PORTS_FROM, ephemeral_ports, free_port


def test_ports_are_chosen_below_the_kernels_ephemeral_range_and_are_free():
    low, high = ephemeral_ports()
    assert 1024 <= low < high <= 65535
    ports = {free_port() for _ in range(40)}
    assert len(ports) > 30  # at random, not one port again and again
    for port in ports:
        assert CHOSEN_PORTS_FROM <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_given_and_no_room_below_the_range_falls_back_to_the_kernels_pick(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        in_use = taken.getsockname()[1]
        monkeypatch.setattr(processes, "ephemeral_ports", lambda: (65535, 65535))
        real, tried = processes.secrets.randbelow, []

        def in_use_twice_then_at_random(n: int) -> int:
            tried.append(len(tried) < 2)
            return in_use - CHOSEN_PORTS_FROM if len(tried) <= 2 else real(n)

        monkeypatch.setattr(processes.secrets, "randbelow", in_use_twice_then_at_random)
        port = free_port()
        assert port != in_use and CHOSEN_PORTS_FROM <= port < 65535 and len(tried) >= 3
        monkeypatch.setattr(processes, "ephemeral_ports", lambda: (CHOSEN_PORTS_FROM + 100, 60999))
        assert free_port() >= 1024  # the kernel's own pick
