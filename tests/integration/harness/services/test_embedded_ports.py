"""A port found free can be taken before the embedded server binds it (another test's process, another user's): the
start is tried again on other ports, and said — not a failed run."""
from __future__ import annotations

import socket

from tailrace.harness.services import servers
from tests.support import make_profile


def test_a_port_taken_before_the_server_binds_it_is_tried_again_on_others(model_repo, tmp_path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real = servers.free_port
    monkeypatch.setattr(servers, "free_port", lambda: next(ports, None) or real())  # the first HTTP port: taken
    said: list[str] = []
    profile = make_profile(model_repo, endpoints=[{"name": "mlp", "url": "embedded", "protocol": "kserve-http",
                                                   "model": "digits_mlp_fp32"}])
    started = servers.start_servers(profile, tmp_path, said.append)
    try:
        [instance] = started.instances
        assert instance.http_url != f"http://127.0.0.1:{taken.getsockname()[1]}" and instance.process.alive()
        assert any("was taken before the endpoint bound it" in line for line in said), said
    finally:
        started.stop()
        taken.close()
