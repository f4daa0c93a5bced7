"""What every part of a profile shares: the strict model, names, the started servers' spellings, URLs, token counts."""
from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailrace.contract.apis import names_where

EMBEDDED = "embedded"
TRITON = "triton"
INPROCESS = "inprocess"
STARTED_BY_RUN = (EMBEDDED, TRITON)
MASTER_CLOCK = "master"  # clock.servers: the SNTP reference `tailrace master` answers on its host


class _Strict(BaseModel):
    # strict: a number must be a number ("100" is refused), no silent coercion
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


NAME = r"^[A-Za-z0-9_.-]{1,64}$"  # names become file names and metric labels
# each serving API's traits are declared once, in contract/apis/registry.py; these name its groups for readers
GENERATIVE = names_where(lambda a: a.generative)  # streamed generation (TTFT, TPOT, ITL)
CHAT_APIS = names_where(lambda a: a.conversation)  # a conversation of messages
POOLING = names_where(lambda a: a.pooling)  # texts in, numbers out (vectors, scores): one whole reply
TLS_SCHEMES = ("https", "grpcs")


def check_url(url: str, schemes: tuple[str, ...]) -> str:
    """A network address `scheme://host[:port][/path]` with a host, no blanks, and a port in 1-65535."""
    if re.search(r"\s", url):
        raise ValueError(f"{url!r} contains blanks")
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ValueError(f"{url!r}: the scheme must be {' or '.join(s + '://' for s in schemes)}")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: the port must be a number from 1 to 65535") from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{url!r}: the port must be a number from 1 to 65535")
    if port is None and parts.scheme in ("grpc", "grpcs"):
        raise ValueError(f"{url!r}: a gRPC address needs a port")
    return url


DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
             "BF16", "BYTES")


def _fixed(value):
    """A bare number where a distribution is asked for: that number, fixed (`turns = 4`, `think_s = 0.3`)."""
    return {"mean": value} if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class TokenCount(_Strict):
    """A number of tokens: a bare number or `mean` alone is fixed; else drawn (seeded) from `distribution`, kept in
    [min, max]."""

    mean: int = Field(ge=1, le=1_000_000)
    distribution: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    stddev: float = Field(0, ge=0, description="normal / lognormal: the standard deviation of the count")
    min: int | None = Field(None, ge=1, description="the smallest count drawn (uniform: the low end)")
    max: int | None = Field(None, ge=1, description="the largest count drawn (uniform: the high end)")

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data):
        return _fixed(data)

    @model_validator(mode="after")
    def _bounds(self) -> "TokenCount":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.distribution == "uniform" and (self.min is None or self.max is None):
            raise ValueError("uniform needs min and max")
        if self.distribution in ("normal", "lognormal") and self.stddev <= 0:
            raise ValueError(f"{self.distribution} needs stddev > 0")
        return self
