"""The summary's building blocks: a row (typed fields, and any key it does not declare kept as read), an
estimate with its interval, a streamed metric's percentiles."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

ALL = "*"  # the row over every endpoint or every region


class SummaryError(ValueError):
    """A summary.json that cannot be read: the message names the file and the field."""


READING = {"reading": True}  # validation context: a summary.json read back (RunSummary.of)


class Row(BaseModel):
    """A row of the summary: its declared fields typed. Made by the analysis (a statistic building its row, or
    RunSummary.assemble), a key it does not declare is an error — a name spelled two ways between a statistic and its
    row is caught, not kept; read from a file (RunSummary.of), any other key is kept as it was read (a newer
    tailrace's addition)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _declared_unless_read(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and not (info.context and info.context.get("reading")):
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = sorted(str(k) for k in data if k not in known)
            if unknown:
                raise ValueError(f"{cls.__name__}: {', '.join(unknown)} not declared (contract/summary)")
        return data


class Estimate(Row):
    """A statistic in ms with its 95% interval; `value` None where the run holds fewer than `min_samples`, the
    interval None where the samples are worth too few independent ones (`note` says which)."""

    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    percentile: float | None = None
    n: int | None = None
    min_samples: int | None = None
    effective_n: int | None = None
    note: str | None = None

    def __str__(self) -> str:
        if self.value is None:
            return "—"
        ci = f" [{self.ci_low:.2f}, {self.ci_high:.2f}]" if self.ci_low is not None and self.ci_high is not None else ""
        return f"{self.value:.2f} ms{ci}"


class TokenMetric(Row):
    """A streamed metric's percentiles with intervals, and its mean (ms)."""

    p50: Estimate | None = None
    p90: Estimate | None = None
    p99: Estimate | None = None
    mean: float | None = None

    def at(self, percentile: str) -> Estimate:
        """The estimate at "p50", "p90" or "p99" (an empty one where the row has none)."""
        return getattr(self, percentile, None) or Estimate()
