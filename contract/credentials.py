"""An endpoint's credential (`auth_header` with `auth_env` or `auth_file`), read at send time and kept nowhere
else: never in the plan, the manifest, a log or a record.

`auth_env`: the environment variable's value. `auth_file`: the file's content without surrounding blanks, re-read
when the file changes (Kubernetes replaces a mounted Secret's files in place when it rotates them), looked at no
more than once every `RECHECK_S` seconds so that the check costs the hot path nothing. A file that vanishes for a
moment during a rotation keeps the last value read."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

RECHECK_S = 1.0


class CredentialError(ValueError):
    """A credential that cannot be read; the message names the variable or file, never a value."""


class Credential:
    """The value of one endpoint's auth header, from the environment or from a file."""

    def __init__(self, header: str, env: str | None = None, file: str | None = None, recheck_s: float = RECHECK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if (env is None) == (file is None):
            raise ValueError("a credential comes from exactly one of an environment variable or a file")
        self.header, self.env, self.file = header, env, file
        self._recheck_s, self._clock = recheck_s, clock
        self._value: str | None = None
        self._stamp: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of the file last read
        self._checked = float("-inf")
        self.reads = 0  # times the file was read (rotations seen + 1)

    @classmethod
    def of(cls, endpoint) -> "Credential | None":
        """The credential a profile's endpoint names, or None when it sends none."""
        if not endpoint.auth_header:
            return None
        return cls(endpoint.auth_header, env=endpoint.auth_env, file=endpoint.auth_file)

    @property
    def source(self) -> str:
        return f"auth_env {self.env}" if self.env is not None else f"auth_file {self.file}"

    def value(self) -> str:
        """The value now; CredentialError when it has never been readable — once it has been read, never (a file
        that turns unreadable keeps its last value). A worker that never could read it records each request as
        `client_error` (contract/records.py), not sent."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if not value:
                raise CredentialError(f"{self.source} is not set (or empty)")
            return value
        now = self._clock()
        if now - self._checked >= self._recheck_s or self._value is None:
            self._checked = now
            self._reread()
        if self._value is None:  # (_reread raises until the file has been read once)
            raise CredentialError(f"{self.source} could not be read")
        return self._value

    def _reread(self) -> None:
        assert self.file is not None  # (a credential is an environment variable or a file)
        try:
            st = os.stat(self.file)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp and self._value is not None:
                return
            with open(self.file, encoding="utf-8") as handle:
                value = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            if self._value is not None:
                return  # a rotation in progress: the last value stands until the new file is there
            raise CredentialError(f"{self.source}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
        if not value:
            if self._value is not None:
                return
            raise CredentialError(f"{self.source} is empty")
        self._value, self._stamp = value, stamp
        self.reads += 1

    def headers(self) -> dict[str, str]:
        """{header: value} now."""
        return {self.header: self.value()}
