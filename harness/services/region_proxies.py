"""Emulated regions on one machine: one delay proxy per region that has a delay or jitter, each on its own
loopback address (127.1.<i+1>.1), forwarding to every network endpoint of the profile."""
from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

from tailrace.contract.internal_processes import DELAY_PROXY, ProxyOptions, ProxyRoute, internal_argv
from tailrace.contract.layout import RunLayout
from tailrace.contract.profile import Profile
from tailrace.harness.services.processes import ManagedProcess, free_port, start_process, stop_each


def region_address(index: int) -> str:
    """The loopback address of emulated region `index` (127.1.<i+1>.1)."""
    return f"127.1.{index + 1}.1"


def proxied_regions(profile: Profile) -> dict[str, str]:
    """Region → its proxy's address, for the regions that get a proxy."""
    if not profile.network_endpoints:
        return {}
    return {r.name: region_address(i) for i, r in enumerate(profile.regions) if r.delay_ms > 0 or r.jitter_ms > 0}


def start_region_proxies(profile: Profile, layout: RunLayout) -> tuple[list[ManagedProcess], dict[str, dict[str, str]]]:
    """Start the proxies for `profile` (endpoint URLs already resolved); returns the processes and, per region,
    the URL each endpoint is reached at through that region's proxy."""
    processes, urls_by_region = [], {}
    try:  # Ctrl-C or SIGTERM while they start: none is left running
        addresses = proxied_regions(profile)
        for i, region in enumerate(profile.regions):
            addr = addresses.get(region.name)
            if addr is None:
                continue
            routes, urls, targets = [], {}, {}
            for ep in profile.network_endpoints:
                u = urlparse(ep.url)
                target = (u.hostname, u.port)
                if target not in targets:
                    targets[target] = free_port(addr)
                    routes.append(ProxyRoute(listen_host=addr, listen_port=targets[target], target_host=u.hostname,
                                             target_port=u.port))
                urls[ep.name] = f"{u.scheme}://{addr}:{targets[target]}"
            options = ProxyOptions(routes=tuple(routes), delay_ms=region.delay_ms, jitter_ms=region.jitter_ms,
                                   seed=profile.load.seed + i)
            processes.append(start_process(f"proxy {region.name}", internal_argv(DELAY_PROXY, options),
                                           layout.log(f"proxy-{region.name}"), cpus=profile.generator.cpus))
            urls_by_region[region.name] = urls
        _wait_accepting([u for urls in urls_by_region.values() for u in urls.values()])
    except BaseException:
        stop_each(p.stop for p in processes)
        raise
    return processes, urls_by_region


def _wait_accepting(urls: list[str], timeout_s: float = 10.0) -> None:
    """Wait until every proxy accepts connections (or the timeout passes: the run then shows errors)."""
    deadline = time.monotonic() + timeout_s
    for url in urls:
        u = urlparse(url)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((u.hostname, u.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)


