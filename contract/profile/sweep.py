"""`[sweep]`: a profile run at many points — load levels and configurations — by `tailrace sweep` (tailrace/sweep.py).

Each axis names a profile field (the path `--set` takes: `load.rate`, `embedded.max_num_seqs.synthetic_lm`,
`endpoints.0.prompts.output_tokens.mean`) and its values, listed or as a range; an axis with only a `name` is a
setting of a server tailrace does not own, filled into the `serve` command's template. The points are the axes'
grid, or a declared list, each run `repeats` times; every point shares the profile's arrival seed, so they pair.
Named SLO tiers (`interactive`, `standard`, `batch`) are judged at every point, and the sweep finds the highest load
each tier holds per configuration, adding load points at each tier's edge until it is within `tolerance`."""
from __future__ import annotations

import re
import string
from typing import Union

from pydantic import Field, model_validator

from tailrace.contract.profile.base import NAME, _Strict
from tailrace.contract.profile.goals import Slo

Level = Union[int, float, str, bool]
FIELD_PATH = r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_-]+)*$"
LOAD_FIELDS = ("load.rate", "load.concurrency")  # the axis a configuration's curve is drawn against


class AxisRange(_Strict):
    """Levels from `start` to `stop` (inclusive where a step lands on it): by `step` (arithmetic) or `factor`
    (geometric)."""

    start: float
    stop: float
    step: float | None = Field(None, gt=0)
    factor: float | None = Field(None, gt=1)

    @model_validator(mode="after")
    def _one_way(self) -> "AxisRange":
        if (self.step is None) == (self.factor is None):
            raise ValueError("give either step or factor")
        if self.stop < self.start:
            raise ValueError("stop must be ≥ start")
        if self.factor is not None and self.start <= 0:
            raise ValueError("a geometric range starts above 0")
        return self

    def levels(self) -> list[int | float]:
        """The levels (whole numbers as ints: a count field takes them)."""
        out: list[int | float] = []
        x, i = self.start, 0
        while x <= self.stop * (1 + 1e-9) and len(out) < 1000:
            level = round(x, 9)
            out.append(int(level) if float(level).is_integer() else level)
            i += 1
            x = self.start + i * self.step if self.step is not None else self.start * (self.factor or 2) ** i
        return out


class Axis(_Strict):
    """One axis of the sweep: a profile field and its levels (`values` or `range`)."""

    field: str | None = Field(None, pattern=FIELD_PATH, description="the profile field it sets (as --set names "
                                                                     "it); none: only the serve command's")
    name: str | None = Field(None, pattern=NAME, description="its name in the serve command and the report (default: "
                                                             "the field's last part)")
    values: list[Level] | None = Field(None, min_length=1)
    range: AxisRange | None = None

    @model_validator(mode="after")
    def _declared(self) -> "Axis":
        if self.field is None and self.name is None:
            raise ValueError("an axis names a profile field, or a name for the serve command")
        if (self.values is None) == (self.range is None):
            raise ValueError("give either values or range")
        return self

    @property
    def key(self) -> str:
        return self.name or (self.field or "").rsplit(".", 1)[-1]

    def levels(self) -> list[Level]:
        return list(self.values) if self.values is not None else list(self.range.levels() if self.range else [])


class Serve(_Strict):
    """A server tailrace does not own, started for each configuration of the sweep (`vllm serve MODEL
    --max-num-seqs {max_num_seqs}`), ready when its health URL answers 200, stopped by its PID after."""

    command: str = Field(min_length=1, description="the command line; {axis} fills in the point's level")
    health_url: str = Field(pattern=r"^https?://", description="answers 200 once the server serves")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables beside tailrace's own")
    ready_timeout_s: float = Field(600, gt=0)
    stop_timeout_s: float = Field(30, gt=0)

    def fields(self) -> list[str]:
        """The axis names its template fills in."""
        text = " ".join([self.command, self.health_url, *self.env.values()])
        return sorted({f for _, f, _, _ in string.Formatter().parse(text) if f})


class Sweep(_Strict):
    """`tailrace sweep`'s points, its servers, its SLO tiers and its search of each tier's edge."""

    axes: list[Axis] = Field(min_length=1)
    points: list[dict[str, Level]] | None = Field(None, min_length=1, description="declared points (axis name → "
                                                                                  "level); none: the axes' grid")
    repeats: int = Field(1, ge=1, le=20)
    serve: Serve | None = None
    tiers: dict[str, list[Slo]] = Field(default_factory=dict, description="named sets of SLOs, judged at every "
                                                                          "point")
    tolerance: float = Field(0.1, gt=0, lt=1, description="a tier's edge is found when its bracket is within this "
                                                          "fraction of its upper end")
    refine: int = Field(4, ge=0, le=50, description="at most this many load points added at each tier's edge, per "
                                                    "configuration")
    budget_s: float | None = Field(None, gt=0, description="stop adding points once this much time is spent")
    extend_s: float = Field(0, ge=0, description="a point a tier could not decide (too few requests for a "
                                                 "percentile) runs again, long enough to decide as capacity search's "
                                                 "trials do (at least twice as long), up to this many seconds of load; "
                                                 "0: never")

    @model_validator(mode="after")
    def _consistent(self) -> "Sweep":
        keys = [a.key for a in self.axes]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"axes: two axes are named {dupes[0]!r} (give one a name)")
        loads = [a.key for a in self.axes if a.field in LOAD_FIELDS]
        if len(loads) > 1:
            raise ValueError(f"axes: one load axis at most ({', '.join(loads)})")
        if self.serve is not None:
            unknown = [f for f in self.serve.fields() if f not in keys]
            if unknown:
                raise ValueError(f"serve.command: {{{unknown[0]}}} names no axis (axes: {', '.join(keys)})")
        for i, point in enumerate(self.points or []):
            missing = [k for k in keys if k not in point]
            extra = [k for k in point if k not in keys]
            if extra or missing:
                raise ValueError(f"points[{i}]: " + (f"{extra[0]!r} is no axis" if extra else f"no level for axis "
                                                                                         f"{missing[0]!r}"))
        for name in self.tiers:
            if not re.fullmatch(NAME, name):
                raise ValueError(f"tiers: {name!r} is not a name (letters, digits, _ . -)")
        return self

    @property
    def load_axis(self) -> Axis | None:
        """The axis the curves are drawn against (load.rate or load.concurrency), if any."""
        return next((a for a in self.axes if a.field in LOAD_FIELDS), None)
