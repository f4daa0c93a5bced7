"""A minimal SNTP server (RFC 4330) used as the time reference when no NTP server is at hand.

`tailrace run` starts it on 127.0.0.1 for profiles whose clock.servers is 'embedded'. Real runs name
real NTP servers (chronyd, ntpd, a cloud provider's).
"""
from __future__ import annotations

import socket
import struct
import sys
import time

from tailrace.contract.internal_processes import SNTP_SERVER, ListenError, SntpOptions, options_from_argv

_NTP_EPOCH_DELTA = 2208988800


def _to_ntp(t: float) -> tuple[int, int]:
    t += _NTP_EPOCH_DELTA
    sec = int(t)
    return sec, int((t - sec) * 2**32)


def serve_sntp(host: str, port: int, ready_message: bool = True) -> None:
    """Answer client (mode 3) packets forever with this machine's time (stratum 2)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(host, port, exc) from None
    if ready_message:
        print(f"tailrace sntp: serving on {host}:{port}", flush=True)
    while True:
        data, addr = sock.recvfrom(512)
        recv = time.time()
        if len(data) < 48 or (data[0] & 0x7) != 3:
            continue
        version = (data[0] >> 3) & 0x7
        orig = data[40:48]
        rs, rf = _to_ntp(recv)
        header = struct.pack("!BBbb11I", (0 << 6) | (version << 3) | 4, 2, 6, -20, 0, 0,
                             0x7F000001, rs, rf, 0, 0, rs, rf, 0, 0)
        header = header[:24] + orig + header[32:40]
        ts, tf = _to_ntp(time.time())
        sock.sendto(header + struct.pack("!II", ts, tf), addr)


def main(argv: list[str]) -> int:
    """The reference as a run starts it: `python -m tailrace.harness.services.sntp_server OPTIONS_JSON`."""
    options = options_from_argv(SntpOptions, argv, SNTP_SERVER)
    serve_sntp(options.host, options.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
