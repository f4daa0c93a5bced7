"""Addresses: what counts as this machine (loopback), shared by every command that binds a port."""
from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
