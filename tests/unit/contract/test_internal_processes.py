"""The processes tailrace starts for itself take their options as one JSON argument: what the starter builds from
a profile is what the process reads, and a bad argument is one line and exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailrace.contract.internal_processes import (
    SNTP_SERVER,
    EmbeddedServerLaunch,
    ProxyOptions,
    ProxyRoute,
    ServerOptions,
    internal_argv,
    options_from_argv,
)
from tailrace.harness.services.servers import embedded_server_options
from tests.support import make_profile


def test_the_profile_s_embedded_table_is_the_server_s_options(tmp_path):
    profile = make_profile(tmp_path, embedded={
        "models_dir": str(tmp_path), "slots": {"digits_mlp_fp32": 2}, "max_batch": {"digits_mlp_fp32": 8},
        "max_num_seqs": {"synthetic_lm": 4}, "max_model_len": {"synthetic_lm": 16384},
        "prefix_caching": {"synthetic_lm": False}, "mm1_mean_ms": 3.0, "fault_injection": True})
    options = embedded_server_options(profile, ("synthetic_lm",))
    assert options == ServerOptions(
        repository=Path(tmp_path), slots={"digits_mlp_fp32": 2}, max_batch={"digits_mlp_fp32": 8},
        queue_depth={}, batching={"synthetic_lm": {"max_num_seqs": 4, "max_model_len": 16384,
                                                    "enable_prefix_caching": 0}},
        service_time_mean_ms=3.0, fault_injection=True, models=("synthetic_lm",))
    launch = EmbeddedServerLaunch(options=options, http_port=8000, grpc_port=8001)
    argv = internal_argv("tailrace.endpoints.server", launch)
    assert argv[:3] == [sys.executable, "-m", "tailrace.endpoints.server"] and len(argv) == 4
    assert options_from_argv(EmbeddedServerLaunch, argv[3:], "m") == launch


def test_a_proxy_route_reads_as_the_command_line_spells_it():
    route = ProxyRoute.parse("127.0.0.2:9000=127.0.0.1:8000")
    assert (route.listen_host, route.listen_port, route.target_host, route.target_port) == ("127.0.0.2", 9000,
                                                                                             "127.0.0.1", 8000)
    assert str(route) == "127.0.0.2:9000->127.0.0.1:8000"
    with pytest.raises(ValueError, match="route must be LISTEN_HOST:PORT=TARGET_HOST:PORT"):
        ProxyRoute.parse("127.0.0.2:9000")
    with pytest.raises(ValueError):
        ProxyOptions(routes=())


@pytest.mark.parametrize("argument,names", [
    ('{"port": 0}', "port: Input should be greater than 0"),
    ('{"host": "127.0.0.1", "speed": 3}', "speed: Extra inputs are not permitted"),
    ("not json", "Invalid JSON"),
])
def test_a_bad_options_argument_is_one_line_and_exit_2(argument, names):
    r = subprocess.run([sys.executable, "-m", SNTP_SERVER, argument], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and names in r.stderr and "SntpOptions" in r.stderr, r.stderr
