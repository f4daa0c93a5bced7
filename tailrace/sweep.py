"""`tailrace sweep PROFILE`: the profile run at every point of its `[sweep]` (contract/profile/sweep.py) — the axes'
grid or its declared points, `repeats` times — each point a full run (its own run directory and report under
points/), every point sharing the profile's arrival seed (a repeat draws the next one). A `serve` command is started
for each configuration (the point's non-load levels filled in), waited for on its health URL, and stopped by its PID
after; one that never becomes ready fails its points, with its log's tail, and the sweep goes on. After a
configuration's declared points, load points are added at each SLO tier's edge (the middle of its bracket) until the
edge is within `tolerance`, `refine` points were added, or the budget is spent.

sweep.json is written after every point: `tailrace sweep --resume DIR` keeps the points done, runs again the one
that was cut short (its run directory is kept, listed in `interrupted_runs`) and the rest. Bad input (an axis naming
no field, a level of the wrong type, a template naming no axis) is one line, exit 2, before anything starts."""
from __future__ import annotations

import itertools
import json
import secrets
import shlex
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tailrace.analysis.decide import frontier as answers
from tailrace.analysis.decide.capacity_search import duration_to_decide_s, generator_saturated, out_of_reach, retry_duration_s
from tailrace.capacity import RunInterrupted, run_once
from tailrace.contract import exit_codes
from tailrace.contract.layout import ReportLayout, SweepLayout, write_atomic
from tailrace.contract.overrides import OverrideError, apply
from tailrace.contract.profile import Profile, ProfileError, parse_profile
from tailrace.contract.profile.sweep import Level, Sweep
from tailrace.contract.summary.sweep import SweepPoint, SweepResult
from tailrace.harness.orchestration.disk_space import LowDiskError
from tailrace.harness.orchestration.endpoint_check import EndpointCheckError
from tailrace.harness.orchestration.live_page import LivePage
from tailrace.harness.services.processes import ManagedProcess, start_process, wait_http_ok


class SweepError(ValueError):
    """A sweep that cannot start or resume (one line naming the axis, field or file)."""


@dataclass(frozen=True)
class PointSpec:
    """One point to run: its levels (axis → level), its repeat, and whether the edge search added it."""

    levels: dict[str, Level]
    repeat: int = 0
    added: bool = False

    def key(self) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in self.levels.items())), self.repeat


@dataclass
class SweepPlan:
    """The profile as read, its sweep, and how a point's profile is made from it."""

    source: str
    data: dict
    sweep: Sweep
    base_slos: int = 0
    tier_slos: dict[str, list[int]] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # the user's (--set, TAILRACE_SET_*), on every point

    @classmethod
    def read(cls, text: str, source: str, overrides: Sequence[str] = ()) -> SweepPlan:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SweepError(f"{source}: not valid TOML: {exc}") from None
        if overrides:
            if "overrides" in data:
                raise SweepError(f"{source}: overrides: set by --set and TAILRACE_SET_*, not in a profile file")
            try:
                data = apply(data, list(overrides))
            except OverrideError as exc:
                raise SweepError(f"{source}: {exc}") from None
            source = f"{source} (with {', '.join(overrides)})"
        try:
            profile = parse_profile(data, source)
        except ProfileError as exc:
            raise SweepError(str(exc).splitlines()[0]) from None
        if profile.sweep is None:
            raise SweepError(f"{source}: sweep: the profile has no [sweep] section (its axes and points)")
        base = len(data.get("slos", []))
        tier_slos, at = {}, base
        for tier, slos in profile.sweep.tiers.items():
            tier_slos[tier] = list(range(at, at + len(slos)))
            at += len(slos)
        return cls(source, data, profile.sweep, base, tier_slos, list(overrides))

    @property
    def load_key(self) -> str | None:
        axis = self.sweep.load_axis
        return axis.key if axis is not None else None

    def config(self, levels: dict[str, Level]) -> str:
        """A configuration's label: its non-load levels ('' where the sweep varies only the load)."""
        return ", ".join(f"{k}={v}" for k, v in levels.items() if k != self.load_key)

    def specs(self) -> list[PointSpec]:
        """The declared points (the grid of the axes, or the listed ones), configuration by configuration."""
        keys = [a.key for a in self.sweep.axes]
        grid = self.sweep.points or [dict(zip(keys, combo)) for combo in
                                     itertools.product(*(a.levels() for a in self.sweep.axes))]
        ordered = sorted(grid, key=lambda lv: (self.config(lv), _number(lv.get(self.load_key or ""))))
        return [PointSpec(dict(lv), r) for lv in ordered for r in range(self.sweep.repeats)]

    def profile(self, spec: PointSpec, duration_s: float | None = None) -> Profile:
        """The point's profile: the axes' fields set (validated as the file is: errors name the axis), the tiers'
        SLOs beside the profile's own, a repeat's seed the next one; `duration_s`: its load's seconds, where it runs
        again to decide (sweep.extend_s)."""
        overrides = [f"{a.field}={_toml(spec.levels[a.key])}" for a in self.sweep.axes if a.field is not None]
        if duration_s is not None:
            overrides.append(f"load.duration_s={duration_s:g}")
        label = ", ".join(f"{k}={v}" for k, v in spec.levels.items())
        try:
            data = apply(self.data, overrides)
        except OverrideError as exc:
            raise SweepError(f"{self.source}: sweep point {label}: {exc}") from None
        tiers = [s.model_dump(mode="json", exclude_none=True) for slos in self.sweep.tiers.values() for s in slos]
        data["slos"] = list(data.get("slos", [])) + tiers
        if spec.repeat:
            data["load"] = dict(data.get("load", {})) | {"seed": int(data.get("load", {}).get("seed", 0)) + spec.repeat}
        try:
            return parse_profile(data | {"overrides": [*self.overrides, *overrides]},
                                 f"{self.source} (sweep point {label})")
        except ProfileError as exc:
            raise SweepError(str(exc).splitlines()[0]) from None

    def serve_command(self, levels: dict[str, Level]) -> tuple[list[str], str, dict[str, str]] | None:
        """The configuration's server: its command line, health URL and environment, the levels filled in."""
        serve = self.sweep.serve
        if serve is None:
            return None
        return (shlex.split(serve.command.format(**levels)), serve.health_url.format(**levels),
                {k: v.format(**levels) for k, v in serve.env.items()})


def _number(value: Level | None) -> float:
    """A load level as a number to order points by (a level that is not one sorts first; validation refuses it)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("-inf")


def _toml(value: Level) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


@contextmanager
def serving(plan: SweepPlan, levels: dict[str, Level], logs: Path, label: str) -> Iterator[str | None]:
    """The configuration's server, started and ready (yields None), or why it is not (yields the reason); stopped
    by its PID after."""
    command = plan.serve_command(levels)
    if command is None:
        yield None
        return
    argv, health, env = command
    serve = plan.sweep.serve
    timeouts = (serve.ready_timeout_s, serve.stop_timeout_s) if serve is not None else (600.0, 30.0)
    log = logs / f"serve-{_slug(label) or 'default'}.log"
    process: ManagedProcess | None = None
    try:
        try:
            process = start_process("serve", argv, log, env=env, with_parent=True)
            wait_http_ok(health, process, timeout=timeouts[0])
        except (OSError, RuntimeError) as exc:
            tail = process.log_tail(12) if process is not None else ""
            yield f"the serve command never became ready ({str(exc).splitlines()[0]}): {tail[-600:]}".strip()
            return
        yield None
    finally:
        if process is not None:
            process.stop(timeouts[1])


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def measure_point(plan: SweepPlan, spec: PointSpec, index: int, run_dir: Path, root: Path, elapsed: float
                  ) -> SweepPoint:
    """Analyse a point's run (its report written) into its row of sweep.json."""
    from tailrace.analysis.analyze import analyze_run
    from tailrace.analysis.analyze_command import write_outputs
    from tailrace.analysis.read.rundir import ANALYSIS_COLUMNS

    a = analyze_run(run_dir, ANALYSIS_COLUMNS, retain=answers.GOODPUT_COLUMNS)
    write_outputs(a, ReportLayout.of_run(run_dir).dir)
    outcomes = answers.tier_outcomes(a.summary, plan.tier_slos)
    duration = a.data.plan.profile.load.duration_s
    undecided = {i for t, at in plan.tier_slos.items() if outcomes[t][0] == answers.UNDECIDED for i in at}
    to_decide = duration_to_decide_s([v for v in a.summary.slos if v.slo in undecided], duration) if undecided \
        else None
    profile_slos = [s.model_dump() for s in a.data.plan.profile.slos]
    goodput = answers.tier_goodput(a.requests, {t: [profile_slos[i] for i in at] for t, at in plan.tier_slos.items()},
                                   a.summary.duration_s, {e.name for e in a.data.plan.profile.endpoints if e.generative})
    return SweepPoint(index=index, config=plan.config(spec.levels), levels=spec.levels, load=_load(plan, spec),
                      repeat=spec.repeat, added=spec.added, status="done", run_id=a.summary.run_id,
                      run_dir=str(run_dir.relative_to(root)), tiers={t: o for t, (o, _) in outcomes.items()},
                      tier_why={t: w for t, (_, w) in outcomes.items()}, goodput_rps=goodput, elapsed_s=elapsed,
                      duration_s=duration, to_decide_s=to_decide,
                      generator_limit="; ".join(a.summary.invalid_reasons)[:300]
                      if generator_saturated(a.summary.valid, a.summary.invalid_reasons) else "",
                      **answers.measured(a.summary, answers.held_tokens_per_s(a.token_figures.timeline,
                                                                              a.summary.duration_s)))


def _load(plan: SweepPlan, spec: PointSpec) -> float | None:
    value = spec.levels.get(plan.load_key or "")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Sweeper:
    """One sweep's loop: its plan, directory and result so far (sweep.json after every point)."""

    plan: SweepPlan
    layout: SweepLayout
    result: SweepResult
    quiet: bool = False
    budget_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    page: LivePage | None = None  # the live page, through every point
    stopped: bool = False  # from the live page: the point cut short, the sweep ended (resumable)

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, flush=True)

    def save(self) -> None:
        self.result.elapsed_s = round(self.result.elapsed_s + time.monotonic() - self.started, 3)
        self.started = time.monotonic()
        write_atomic(self.layout.result, self.result.model_dump_json(indent=1, exclude_none=False))

    def over_budget(self) -> bool:
        return self.budget_s is not None and time.monotonic() - self.started + self.result.elapsed_s > self.budget_s

    def done(self) -> set[tuple]:
        return {PointSpec(p.levels, p.repeat).key() for p in self.result.points if p.status in ("done", "failed")}

    def run(self, specs: Sequence[PointSpec]) -> None:
        """Every configuration's declared points, then its tiers' edges."""
        by_config: dict[str, list[PointSpec]] = {}
        for spec in specs:
            by_config.setdefault(self.plan.config(spec.levels), []).append(spec)
        total = len(specs)
        for config, mine in by_config.items():
            todo = [s for s in mine if s.key() not in self.done()]
            if not todo and not self._open_edges(config):
                continue
            with serving(self.plan, mine[0].levels, self.layout.logs, config) as not_ready:
                for spec in todo:
                    if self.over_budget():
                        self.log("budget spent: the sweep stops here (resume it to go on)")
                        return
                    self.point(spec, total, not_ready)
                    if self.stopped:
                        return
                while self._added(config) < self.plan.sweep.refine:
                    loads = [load for c, load in self._edge_loads(config) if c == config]
                    if not loads or self.over_budget() or not_ready:
                        break
                    levels = dict(mine[0].levels) | {self.plan.load_key or "": _level(loads[0])}
                    self.point(PointSpec(levels, 0, added=True), total, not_ready)
                    if self.stopped:
                        return

    def _edge_loads(self, config: str) -> list[tuple[str, float]]:
        mine = [p for p in self.result.points if p.config == config]
        edges = answers.tier_edges(mine, list(self.plan.sweep.tiers), self.plan.sweep.tolerance)
        tried = {config: {p.load for p in mine if p.load is not None}}
        return answers.next_loads(edges, tried)

    def _added(self, config: str) -> int:
        return sum(1 for p in self.result.points if p.config == config and p.added)

    def _open_edges(self, config: str) -> bool:
        return self._added(config) < self.plan.sweep.refine and bool(self._edge_loads(config))

    def point(self, spec: PointSpec, total: int, not_ready: str | None) -> None:
        index = len(self.result.points) + 1
        label = ", ".join(f"{k}={v}" for k, v in spec.levels.items()) + (f" (repeat {spec.repeat})" if spec.repeat
                                                                          else "")
        began = time.monotonic()
        if not_ready:
            row = SweepPoint(index=index, config=self.plan.config(spec.levels), levels=spec.levels,
                             load=_load(self.plan, spec), repeat=spec.repeat, added=spec.added, status="failed",
                             why=not_ready)
        else:
            self.log(f"point {index}: {label} …")
            self.result.points.append(SweepPoint(index=index, config=self.plan.config(spec.levels),
                                                 levels=spec.levels, load=_load(self.plan, spec), repeat=spec.repeat,
                                                 added=spec.added, status="interrupted"))
            self.save()  # a point cut short from here on is found interrupted by --resume
            self.result.points.pop()
            self._show(index, label, total)
            measured = self._measure(spec, index, began, label)
            if measured is None:  # cut short: the sweep ends
                return
            row = measured
        self.result.points.append(row)
        self.save()
        left, eta = self._left(total)
        tiers = ", ".join(f"{t} {o}" for t, o in row.tiers.items())
        self.log(f"point {index}: {label} → {row.status}{': ' + tiers if tiers else ''}{': ' + row.why if row.why else ''}"
                 f"; {left} declared point(s) left" + (f", ~{eta / 60:.1f} min" if eta else ""))


    def _measure(self, spec: PointSpec, index: int, began: float, label: str) -> SweepPoint | None:
        """A point's row: its run, run again once where its generator fell behind and longer where it was undecided
        (extend_s). Where a run again fails (a server gone), the point keeps the run before it, its why saying so.
        None: cut short (the sweep ends)."""
        last: SweepPoint | None = None
        duration, shorter, rerun = None, [], False
        while True:
            measured = self._run(spec, index, began, duration)
            if measured is None:
                return None
            if last is not None:
                if measured.status == "failed":
                    last.why = f"its run again failed: {measured.why}"
                    break
                if duration is not None and duration != last.duration_s:  # a longer run replaces it
                    shorter.append(last.duration_s or 0.0)
            last = measured
            if self._generator_rerun(last, rerun):
                rerun = True
                self.log(f"point {index}: {label} → the generator fell behind ({last.generator_limit}); again …")
                continue
            longer = self._longer(last)
            if longer is None:
                break
            undecided = ", ".join(t for t, o in last.tiers.items() if o == answers.UNDECIDED)
            self.log(f"point {index}: {label} → {undecided} undecided (too few requests in {last.duration_s:g} s);"
                     f" again for {longer:.3g} s …")
            duration = longer
        last.extended_from_s, last.generator_rerun = shorter, rerun
        self._beyond_reach(last)
        return last

    def _run(self, spec: PointSpec, index: int, began: float, duration_s: float | None) -> SweepPoint | None:
        """One run of a point (`duration_s`: its load's seconds where it runs again to decide) and its row; None
        where it was cut short (the sweep ends)."""
        try:
            run_dir = run_once(self.plan.profile(spec, duration_s), self.layout.points, live=self.page)
        except RunInterrupted as cut:  # Ctrl-C or SIGTERM: its processes are stopped; the sweep ends
            self._cut_short(index, cut.run_dir, "interrupted")
            return None
        except (EndpointCheckError, LowDiskError, RuntimeError, OSError) as exc:  # this point's, not the sweep's
            return SweepPoint(index=index, config=self.plan.config(spec.levels), levels=spec.levels,
                              load=_load(self.plan, spec), repeat=spec.repeat, added=spec.added, status="failed",
                              why=str(exc).splitlines()[0][:600] if str(exc) else type(exc).__name__)
        if self.page is not None and self.page.stop_requested.is_set():
            self._cut_short(index, run_dir, "stopped from the live page")
            return None
        try:
            return measure_point(self.plan, spec, index, run_dir, self.layout.dir, round(time.monotonic() - began, 3))
        except KeyboardInterrupt:  # while its report was written
            self._cut_short(index, run_dir, "interrupted")
            return None

    def _generator_rerun(self, row: SweepPoint, rerun: bool) -> bool:
        """Whether to run a point again at the same length: its generator fell behind (the numbers are the
        generator's), once per point as capacity search does — a noisy machine's stall must not place a point."""
        return row.status == "done" and bool(row.generator_limit) and not rerun and not self.over_budget()

    def _longer(self, row: SweepPoint) -> float | None:
        """How long to run an undecided point again (sweep.extend_s), or None: decided, not allowed, or no run up to
        extend_s would decide it (capacity search's rule: retry_duration_s)."""
        limit = self.plan.sweep.extend_s
        if row.status != "done" or not limit or answers.UNDECIDED not in row.tiers.values() or not row.duration_s \
                or self.over_budget():
            return None
        return retry_duration_s(answers.UNDECIDED, row.duration_s, limit, False, row.to_decide_s)

    def _beyond_reach(self, row: SweepPoint) -> None:
        """An undecided tier's why, where extend_s is set and the point was not run again (or again): how long deciding
        would take, or that the sweep's budget was spent."""
        limit = self.plan.sweep.extend_s
        if not limit or row.status != "done":
            return
        reach = (f"undecided after {row.duration_s:g} s of load: " if row.duration_s else "") + (
            "the sweep's budget was spent" if self.over_budget() else out_of_reach(row.to_decide_s, limit, "extend_s"))
        for tier, outcome in row.tiers.items():
            if outcome == answers.UNDECIDED:
                row.tier_why[tier] = f"{row.tier_why.get(tier, '')} — {reach}"

    def _cut_short(self, index: int, run_dir: Path, how: str) -> None:
        """A point cut short (its run kept, listed as interrupted, run again by --resume): the sweep ends here."""
        self.stopped = True
        self.result.interrupted_runs.append(str(run_dir.relative_to(self.layout.dir)))
        self.log(f"point {index}: {how}; the sweep ends here (go on with tailrace sweep --resume {self.layout.dir})")

    def _left(self, total: int) -> tuple[int, float | None]:
        """(declared points left, an estimate of the seconds they take: the points so far, on average)."""
        finished = [p for p in self.result.points if p.elapsed_s]
        left = max(0, total - sum(1 for p in self.result.points if not p.added))
        return left, (sum(p.elapsed_s or 0 for p in finished) / len(finished) * left) if finished else None

    def _show(self, index: int, label: str, total: int) -> None:
        """The live page says which point runs now (and reloads for it)."""
        if self.page is not None:
            left, eta = self._left(total)
            self.page.show_point(sweep_id=self.result.sweep_id, index=index, label=label, declared=total,
                                 done=total - left, left=left, eta_s=round(eta, 1) if eta is not None else None)


def _level(value: float) -> Level:
    return int(value) if float(value).is_integer() else value


def start_sweep(profile_path: Path, out: Path, overrides: Sequence[str] = ()
                ) -> tuple[SweepLayout, SweepPlan, SweepResult]:
    """A new sweep's directory (its profile copied in), plan and empty result — every point's profile validated
    first: nothing starts on bad input. `overrides` (--set) apply to every point, and again on --resume."""
    try:
        text = profile_path.read_text()
    except OSError as exc:
        raise SweepError(f"{profile_path}: {exc.strerror or exc}") from None
    plan = SweepPlan.read(text, str(profile_path), overrides)
    specs = plan.specs()
    for spec in specs:
        plan.profile(spec)
    name = plan.data.get("name", "sweep")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    layout = SweepLayout(out / f"{name}-sweep-{stamp}-{secrets.token_hex(2)}")
    layout.points.mkdir(parents=True)
    write_atomic(layout.profile, text)
    result = SweepResult(profile=name, sweep_id=layout.dir.name, load_axis=plan.load_key,
                         axes={a.key: a.levels() for a in plan.sweep.axes}, tiers=list(plan.sweep.tiers),
                         overrides=list(overrides))
    return layout, plan, result


def resume_sweep(sweep_dir: Path, overrides: Sequence[str] = ()) -> tuple[SweepLayout, SweepPlan, SweepResult]:
    """A sweep cut short: its plan from the profile it saved and the overrides it began with, its points so far; a
    point's run directory that no finished point names (cut short) is listed as interrupted and kept. `overrides`
    given again must be those: a sweep's points are one set of settings."""
    layout = SweepLayout(sweep_dir)
    try:
        text = layout.profile.read_text()
        result = SweepResult.model_validate_json(layout.result.read_text())
    except OSError as exc:
        raise SweepError(f"{sweep_dir}: not a sweep directory ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise SweepError(f"{layout.result}: not a sweep's result ({str(exc).splitlines()[0]})") from None
    if overrides and list(overrides) != result.overrides:
        began = ", ".join(result.overrides) or "none"
        raise SweepError(f"{sweep_dir}: --set {', '.join(overrides)}: a sweep resumes with the overrides it began "
                         f"with ({began}), so that its points stay comparable")
    plan = SweepPlan.read(text, str(layout.profile), result.overrides)
    result.points = [p for p in result.points if p.status != "interrupted"]
    named = {p.run_dir for p in result.points if p.run_dir}
    kept = sorted(str(d.relative_to(layout.dir)) for d in layout.points.iterdir() if d.is_dir()
                  and str(d.relative_to(layout.dir)) not in named) if layout.points.exists() else []
    result.interrupted_runs = sorted(set(result.interrupted_runs) | set(kept))
    result.complete = False
    return layout, plan, result


def finish(sweeper: Sweeper) -> SweepResult:
    """The sweep's answers from its points: edges, knees, the frontier and the recommendation."""
    r, plan = sweeper.result, sweeper.plan
    tiers = list(plan.sweep.tiers)
    r.edges = answers.tier_edges(r.points, tiers, plan.sweep.tolerance)
    r.knees = answers.knees(r.points)
    r.frontier = answers.frontier(r.points)
    r.accuracy_trends = answers.accuracy_trends(r.points)
    unit = {"load.rate": "req/s", "load.concurrency": "streams"}.get(
        plan.sweep.load_axis.field if plan.sweep.load_axis and plan.sweep.load_axis.field else "", "")
    r.recommendation = answers.recommendation(r.edges, tiers, unit) + [
        f"accuracy {tr.verdict} as load rises for {tr.endpoint or 'the points'}: {tr.accuracy[0]:.1%} at "
        f"{tr.loads[0]:g} {unit}, {tr.accuracy[-1]:.1%} at {tr.loads[-1]:g} {unit} (p = {tr.p_value:.2g})"
        for tr in r.accuracy_trends if tr.verdict in ("falls", "rises") and tr.p_value is not None]
    r.complete = not sweeper.over_budget() and not sweeper.stopped
    sweeper.save()
    return r


def run_sweep(profile_path: Path | None, out: Path, resume: Path | None = None, quiet: bool = False,
              budget_s: float | None = None, ui: tuple[str, int] | None = None,
              overrides: Sequence[str] = ()) -> tuple[Path, SweepResult]:
    """Run (or resume) a sweep and write its report; returns (its directory, its result). `ui`: where its live page
    is served (host, port; None: none) — one page through every point. `overrides`: --set, on every point. OSError:
    the page cannot bind."""
    from tailrace.run_command import open_live_page
    from tailrace.sweep_report import write_sweep_report

    if resume is not None:
        layout, plan, result = resume_sweep(resume, overrides)
    elif profile_path is not None:
        layout, plan, result = start_sweep(profile_path, out, overrides)
    else:
        raise SweepError("tailrace sweep: give a PROFILE, or --resume DIR")
    page = open_live_page(ui, secrets.token_urlsafe(16), "tailrace sweep", quiet)
    sweeper = Sweeper(plan, layout, result, quiet, budget_s or plan.sweep.budget_s, page=page)
    sweeper.log(f"sweep {layout.dir.name}: {len(plan.specs())} declared point(s) → {layout.dir}")
    done: SweepResult | None = None
    try:
        try:
            sweeper.run(plan.specs())
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM between points (a server starting, a point's run starting)
            sweeper.stopped = True
            sweeper.log(f"interrupted; the sweep ends here (go on with tailrace sweep --resume {layout.dir})")
        finally:
            sweeper.save()
        done = finish(sweeper)
        write_sweep_report(layout, done)
        return layout.dir, done
    finally:
        if page is not None:
            state = "COMPLETE" if done is not None and done.complete else "STOPPED" if sweeper.stopped else \
                "INCOMPLETE"
            page.finish(state, sweep_exit_code(done) if done is not None else exit_codes.INCONCLUSIVE,
                        layout.page if done is not None and layout.page.exists() else None, record=False)
            page.close()


def sweep_exit_code(result: SweepResult) -> int:
    """`tailrace sweep`'s exit code: 0 complete, 1 a point failed, 3 stopped or the budget spent before its end."""
    if not result.complete:
        return exit_codes.INCONCLUSIVE
    return exit_codes.FAIL if any(p.status == "failed" for p in result.points) else exit_codes.OK


__all__ = ["PointSpec", "SweepError", "SweepPlan", "run_sweep", "sweep_exit_code"]
