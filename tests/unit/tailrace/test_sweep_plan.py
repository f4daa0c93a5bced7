"""`tailrace sweep`'s plan and answers, without a run: the grid or the declared points with repeats, each point's
profile validated as the file is (bad input: one line naming the axis or field), tier SLOs judged apart, and the
pure answers — each tier's edge and the next load to try there, the knee, the Pareto frontier, the intervals."""
from __future__ import annotations

import pytest

from tailrace.analysis.decide import frontier as answers
from tailrace.contract.summary import Estimate
from tailrace.contract.summary.sweep import SweepPoint
from tailrace.sweep import PointSpec, SweepError, SweepPlan

BASE = '''name = "s"
[[endpoints]]
name = "chat"
url = "embedded"
protocol = "openai-chat"
model = "synthetic_lm"
[[regions]]
name = "r"
share = 1.0
[load]
rate = 5
duration_s = 5
seed = 3
[[slos]]
metric = "ttft"
percentile = 90
threshold_ms = 500
'''


def plan(sweep: str) -> SweepPlan:
    return SweepPlan.read(BASE + sweep, "s.toml")


GRID = '''[sweep]
repeats = 2
[[sweep.axes]]
field = "load.rate"
values = [4, 8]
[[sweep.axes]]
field = "embedded.max_num_seqs.synthetic_lm"
name = "max_num_seqs"
range = { start = 1, stop = 4, factor = 2 }
[sweep.tiers]
interactive = [{ metric = "ttft", percentile = 90, threshold_ms = 100 }]
batch = [{ metric = "tpot", percentile = 90, threshold_ms = 50 }, { metric = "e2e", percentile = 99, threshold_ms = 9000 }]
'''


def test_the_grid_with_repeats_configuration_by_configuration_each_point_its_own_profile():
    p = plan(GRID)
    specs = p.specs()
    assert len(specs) == 2 * 3 * 2 and p.load_key == "rate"
    assert [p.config(s.levels) for s in specs[:4]] == ["max_num_seqs=1"] * 4  # by configuration, then load
    assert [s.levels["rate"] for s in specs[:4]] == [4, 4, 8, 8] and [s.repeat for s in specs[:2]] == [0, 1]
    profile = p.profile(specs[1])
    assert profile.load.rate == 4 and profile.embedded.max_num_seqs == {"synthetic_lm": 1}
    assert profile.load.seed == 4  # a repeat draws the next arrival seed; the points of one repeat share theirs
    assert len(profile.slos) == 4 and p.tier_slos == {"interactive": [1], "batch": [2, 3]}  # the profile's SLO first


def test_declared_points_replace_the_grid():
    p = plan('''[sweep]
points = [{ rate = 4, max_num_seqs = 2 }, { rate = 16, max_num_seqs = 8 }]
[[sweep.axes]]
field = "load.rate"
values = [1]
[[sweep.axes]]
field = "embedded.max_num_seqs.synthetic_lm"
name = "max_num_seqs"
values = [1]
''')
    assert [s.levels for s in p.specs()] == [{"rate": 4, "max_num_seqs": 2}, {"rate": 16, "max_num_seqs": 8}]


@pytest.mark.parametrize("sweep, words", [
    ('[[sweep.axes]]\nfield = "load.speed"\nvalues = [1, 2]\n', "load.speed: unknown key"),
    ('[[sweep.axes]]\nfield = "load.rate"\nvalues = ["fast"]\n', "load.rate"),
    ('[[sweep.axes]]\nfield = "load.rate"\nvalues = [1]\n[sweep.serve]\ncommand = "vllm serve m --max-num-seqs {seqs}"\n'
     'health_url = "http://127.0.0.1:8000/health"\n', "serve.command: {seqs} names no axis"),
    ('[[sweep.axes]]\nfield = "load.rate"\nrange = { start = 10, stop = 1, step = 1 }\n', "stop must be ≥ start"),
    ('points = [{ rate = 1, other = 2 }]\n[[sweep.axes]]\nfield = "load.rate"\nvalues = [1]\n', "'other' is no axis"),
])
def test_bad_input_is_one_line_naming_the_axis_or_field(sweep, words):
    with pytest.raises(SweepError) as caught:
        p = plan("[sweep]\n" + sweep)
        for spec in p.specs():
            p.profile(spec)
    message = str(caught.value)
    assert words in message and "\n" not in message, message


def test_set_overrides_every_point_before_its_levels_and_a_resume_keeps_them(tmp_path):
    """`tailrace sweep P --set load.duration_s=2`: every point's profile has it (and says so in its overrides), an
    axis' level still wins over the same field, sweep.json keeps the overrides and --resume applies them again; a
    resume with other overrides is refused, naming those the sweep began with."""
    from tailrace.sweep import resume_sweep, start_sweep

    profile = tmp_path / "s.toml"
    profile.write_text(BASE + GRID)
    p = SweepPlan.read(profile.read_text(), str(profile), ["load.duration_s=2", "load.rate=99"])
    point = p.profile(p.specs()[0])
    assert point.load.duration_s == 2 and point.load.rate == 4  # the rate axis' level, not the --set
    assert point.overrides[:2] == ["load.duration_s=2", "load.rate=99"] and "load.rate=4" in point.overrides
    layout, _, result = start_sweep(profile, tmp_path / "runs", ["load.duration_s=2"])
    assert result.overrides == ["load.duration_s=2"]
    layout.result.write_text(result.model_dump_json())
    _, again, _ = resume_sweep(layout.dir)
    assert again.profile(again.specs()[0]).load.duration_s == 2
    _, same, _ = resume_sweep(layout.dir, ["load.duration_s=2"])
    assert same.overrides == ["load.duration_s=2"]
    with pytest.raises(SweepError, match=r"--set load.duration_s=9: a sweep resumes with the overrides it began "
                                         r"with \(load.duration_s=2\)"):
        resume_sweep(layout.dir, ["load.duration_s=9"])
    with pytest.raises(SweepError, match=r"s.toml \(with load.nosuch=1\): load.nosuch: unknown key"):
        SweepPlan.read(profile.read_text(), str(profile), ["load.nosuch=1"])


def test_a_profile_without_a_sweep_says_so():
    with pytest.raises(SweepError, match=r"s.toml: sweep: the profile has no \[sweep\] section"):
        SweepPlan.read(BASE, "s.toml")


def point(index, config, load, tiers, ttft_p99=None, tpot=None, tps=None, done=True, gpus=None) -> SweepPoint:
    return SweepPoint(index=index, config=config, levels={}, load=load, tiers=tiers, status="done" if done else "failed",
                      ttft_ms={"p99": Estimate(value=ttft_p99)} if ttft_p99 else {},
                      tokens_per_s_per_user=Estimate(value=tpot) if tpot else None,
                      output_tokens_per_s=Estimate(value=tps, ci_low=tps and tps * 0.9, ci_high=tps and tps * 1.1)
                      if tps else None, gpus=gpus)


def test_each_tiers_edge_its_bracket_and_the_next_load_to_try():
    pts = [point(1, "a", 4, {"i": "pass", "b": "pass"}), point(2, "a", 8, {"i": "pass", "b": "pass"}),
           point(3, "a", 16, {"i": "fail", "b": "pass"}), point(4, "a", 32, {"i": "fail", "b": "undecided"}),
           point(5, "a", 8, {"i": "undecided", "b": "pass"})]  # a repeat at 8 that did not pass: 8 does not hold
    edges = {e.tier: e for e in answers.tier_edges(pts, ["i", "b"], 0.1)}
    assert (edges["i"].highest_pass, edges["i"].lowest_fail) == (4, 8)  # a repeat that did not pass: not held
    assert (edges["b"].highest_pass, edges["b"].lowest_fail) == (16, 32) and not edges["b"].within_tolerance
    assert answers.next_loads(list(edges.values()), {"a": {4, 8, 16, 32}}) == [("a", 6.0)]
    closed = answers.tier_edges([point(1, "a", 95, {"i": "pass"}), point(2, "a", 100, {"i": "fail"})], ["i"], 0.1)
    assert closed[0].within_tolerance and answers.next_loads(closed, {"a": {95, 100}}) == []


def test_a_load_too_low_to_decide_does_not_void_the_passes_above_it():
    """The shipped sweep's case: at 2 req/s a 15 s point has too few requests for a p90 (undecided), and 4, 8, 12
    pass — the configuration holds 12, not "no load passed"; a real failure below a pass still voids it."""
    pts = [point(1, "a", 2, {"i": "undecided"}), point(2, "a", 4, {"i": "pass"}), point(3, "a", 8, {"i": "pass"}),
           point(4, "a", 12, {"i": "pass"}),
           point(5, "b", 2, {"i": "undecided"}), point(6, "b", 4, {"i": "undecided"}), point(7, "b", 8, {"i": "fail"}),
           point(8, "b", 12, {"i": "fail"}),
           point(9, "c", 2, {"i": "fail"}), point(10, "c", 4, {"i": "pass"}),
           point(11, "d", 2, {"i": "undecided"}), point(12, "d", 4, {"i": "pass"}), point(13, "d", 8, {"i": "undecided"})]
    edges = {e.config: e for e in answers.tier_edges(pts, ["i"], 0.1)}
    assert (edges["a"].highest_pass, edges["a"].lowest_fail) == (12, None)
    assert edges["a"].note == "holds up to 12, the highest load tried; undecided at 2 (too few requests to decide)"
    assert (edges["b"].highest_pass, edges["b"].lowest_fail) == (None, 8)
    assert edges["b"].note == "no load passed, fails at 8; undecided at 2, 4 (too few requests to decide)"
    assert (edges["c"].highest_pass, edges["c"].lowest_fail) == (None, 2)  # a failure below a pass: nothing held
    behind = answers.tier_edges([point(1, "e", 2, {"i": "generator-limit"}), point(2, "e", 4, {"i": "pass"}),
                                 point(3, "e", 8, {"i": "generator-limit"})], ["i"], 0.1)[0]
    assert (behind.highest_pass, behind.lowest_fail) == (4, 8)  # the bracket closed where the generator fell behind
    assert behind.note == ("holds up to 4, the generator fell behind at 8; the generator fell behind at 2 (its load "
                           "not sent as asked: not the server's answer)")
    assert (edges["d"].highest_pass, edges["d"].lowest_fail) == (4, 8)  # undecided above: the bracket's top
    assert edges["d"].note.startswith("holds up to 4, undecided at 8")
    assert answers.recommendation(list(edges.values()), ["i"], "req/s")[0].startswith("i: a holds 12 req/s; d holds 4")
    never = answers.tier_edges([point(1, "a", 2, {"i": "undecided"})], ["i"], 0.1)
    assert answers.recommendation(never, ["i"], "req/s") == [
        "i: no load could be decided (too few requests at each: a longer load.duration_s)"]


def test_an_undecided_point_runs_again_long_enough_to_decide_within_extend_s(tmp_path):
    """sweep.extend_s: capacity search's rule — at least twice as long, as long as the neediest SLO's samples say,
    never past extend_s; a point no run that long decides, a decided one, or extend_s 0: not run again. The longer
    run's profile says its length (a setting the runs' history shows)."""
    from tailrace.contract.layout import SweepLayout
    from tailrace.contract.summary.sweep import SweepResult
    from tailrace.sweep import Sweeper

    p = plan(GRID.replace("repeats = 2", "repeats = 2\nextend_s = 60"))
    assert p.sweep.extend_s == 60
    longer = p.profile(p.specs()[0], 30)
    assert longer.load.duration_s == 30 and "load.duration_s=30" in longer.overrides
    sweeper = Sweeper(p, SweepLayout(tmp_path), SweepResult(profile="s", sweep_id="x", axes={}), quiet=True)

    def row(tiers, to_decide=None, duration=5.0, status="done"):
        return SweepPoint(index=1, config="c", levels={}, load=4.0, tiers=tiers, status=status, duration_s=duration,
                          to_decide_s=to_decide)

    assert sweeper._longer(row({"interactive": "undecided", "batch": "pass"}, to_decide=7.0)) == 10.0  # ≥ 2×
    assert sweeper._longer(row({"interactive": "undecided"}, to_decide=20.0)) == pytest.approx(20.0 * 1.2, rel=0.3)
    assert sweeper._longer(row({"interactive": "undecided"}, to_decide=50.0, duration=40.0)) == 60.0  # at most
    assert sweeper._longer(row({"interactive": "undecided"}, to_decide=500.0)) is None  # beyond reach
    assert sweeper._longer(row({"interactive": "undecided"}, to_decide=None)) is None  # on the bound: never
    assert sweeper._longer(row({"interactive": "pass", "batch": "fail"})) is None
    assert sweeper._longer(row({"interactive": "undecided"}, to_decide=7.0, status="failed")) is None
    hopeless = row({"interactive": "undecided", "batch": "pass"}, to_decide=500.0, duration=60.0)
    hopeless.tier_why = {"interactive": "not decidably under the SLO", "batch": "every latency SLO passes"}
    sweeper._beyond_reach(hopeless)  # the why says how far a deciding run is
    assert hopeless.tier_why == {"interactive": "not decidably under the SLO — undecided after 60 s of load: deciding "
                                                "would take ~500 s (extend_s 60)", "batch": "every latency SLO passes"}
    never = Sweeper(plan(GRID), SweepLayout(tmp_path), SweepResult(profile="s", sweep_id="x", axes={}), quiet=True)
    assert never._longer(row({"interactive": "undecided"}, to_decide=7.0)) is None  # extend_s 0: the default


def test_the_knee_is_where_the_monotone_fit_rises_fastest():
    pts = [point(i, "a", load, {}, ttft_p99=v) for i, (load, v) in enumerate(
        [(1, 10.0), (2, 11.0), (3, 10.5), (4, 14.0), (5, 60.0), (6, 200.0)])]
    [knee] = answers.knees(pts)
    assert knee.load == 5 and knee.metric == "ttft p99" and knee.slope_ms_per_unit == pytest.approx(140.0)
    # points too short for a p99 (the summary gives none below 368 requests): their p90 is fitted
    short = [point(i, "a", load, {}) for i, load in enumerate([3, 6, 9, 12])]
    for p, v in zip(short, [20.0, 21.0, 30.0, 900.0]):
        p.ttft_ms = {"p50": Estimate(value=v / 2), "p90": Estimate(value=v), "p99": Estimate(value=None)}
    [knee] = answers.knees(short)
    assert (knee.metric, knee.load) == ("ttft p90", 9) and knee.slope_ms_per_unit == pytest.approx(290.0)


def test_the_pareto_frontier_marks_the_points_no_other_beats_on_both_axes():
    pts = [point(1, "a", 1, {}, tpot=120, tps=100), point(2, "a", 2, {}, tpot=110, tps=400),
           point(3, "b", 1, {}, tpot=100, tps=300), point(4, "b", 2, {}, tpot=90, tps=700)]
    marks = {f.index: f.pareto for f in answers.frontier(pts)}
    assert marks == {1: True, 2: True, 3: False, 4: True}


def test_where_monitors_count_the_gpus_the_frontier_is_per_gpu():
    """Tensor parallel 2 (two GPUs) emits more in all than one GPU, but less per GPU: per GPU it is dominated."""
    pts = [point(1, "tp=1", 1, {}, tpot=100, tps=400, gpus=1), point(2, "tp=2", 1, {}, tpot=100, tps=600, gpus=2)]
    one, two = answers.frontier(pts)
    assert (one.pareto, two.pareto) == (True, False)
    assert two.tokens_per_s_per_gpu.value == 300 and two.tokens_per_s_per_gpu.ci_low == pytest.approx(270)
    assert two.tokens_per_s.value == 600 and two.gpus == 2
    # a point whose GPUs no monitor counted: the frontier stays per server
    assert [f.pareto for f in answers.frontier([pts[0], point(2, "tp=2", 1, {}, tpot=100, tps=600)])] == [False, True]
    from tailrace.analysis.report.sweep_plots import frontier_svg

    assert "per GPU" in frontier_svg([one, two])


def test_intervals_of_a_count_and_of_a_reciprocal():
    est = answers.count_interval(500.0, 100)
    assert est.ci_low < 500 < est.ci_high and 0.8 < est.ci_low / 500 < 0.85  # Garwood at n = 100: [0.81, 1.22]
    user = answers.per_user(Estimate(value=8.0, ci_low=7.9, ci_high=8.2))
    assert user.value == 125.0 and user.ci_low == pytest.approx(1000 / 8.2) and user.ci_high == pytest.approx(1000 / 7.9)


def test_a_recommendation_says_when_two_configurations_edges_overlap():
    edges = answers.tier_edges([point(1, "a", 10, {"i": "pass"}), point(2, "a", 20, {"i": "fail"}),
                                point(3, "b", 12, {"i": "pass"}), point(4, "b", 16, {"i": "fail"})], ["i"], 0.05)
    [line] = answers.recommendation(edges, ["i"], "req/s")
    assert line.startswith("i: b holds 12 req/s (fails at 16); a holds 10") and "not significant" in line
    assert PointSpec({"rate": 1}, 1).key() != PointSpec({"rate": 1}, 0).key()


def test_the_sweeps_exit_code_says_complete_a_failed_point_or_cut_short():
    from tailrace.contract.summary.sweep import SweepResult
    from tailrace.sweep import sweep_exit_code

    def result(complete: bool, *done: bool) -> SweepResult:
        return SweepResult(profile="p", sweep_id="s", axes={}, complete=complete,
                           points=[point(i, "c", 1, {}, done=d) for i, d in enumerate(done, 1)])

    assert [sweep_exit_code(result(True, True, True)), sweep_exit_code(result(True, True, False)),
            sweep_exit_code(result(False, True))] == [0, 1, 3]


def test_a_point_whose_generator_fell_behind_runs_again_once_and_stays_off_the_frontier(tmp_path):
    """A run INVALID because the generator could not keep the schedule measured the generator, not the server: the
    point runs again once at the same length (capacity search's rule for a generator-limit trial); a second such run
    is kept, said in its row and its status cell, and is no operating point on the frontier."""
    from tailrace.analysis.decide.capacity_search import generator_saturated
    from tailrace.contract.layout import SweepLayout
    from tailrace.contract.summary.sweep import SweepResult
    from tailrace.sweep import Sweeper
    from tailrace.sweep_report import _status

    behind = "near-w0: 1626 ms behind schedule when the run ended (1.2–6.0 s into the run; generator saturated)"
    assert generator_saturated(False, [behind]) and not generator_saturated(True, [])
    assert generator_saturated(False, ["far-w1: generator paused or stalled for 0.61 s at 3.2 s into the run"])
    assert generator_saturated(False, ["near-w0: 900 requests in flight exceeds the bound 800 (generator or ...)"])
    assert not generator_saturated(False, ["clock offset unknown for near-w0"])
    p = plan(GRID)
    spec = p.specs()[0]

    def row(limit: str) -> SweepPoint:
        return SweepPoint(index=1, config="c", levels=spec.levels, load=4.0, tiers={"interactive": "pass"},
                          duration_s=5.0, generator_limit=limit, output_tokens_per_s=Estimate(value=100.0),
                          tokens_per_s_per_user=Estimate(value=10.0))

    gone = "endpoint check failed: connection refused"
    for case, (runs, rerun, limit) in enumerate((([behind, ""], True, ""), ([behind, behind], True, behind),
                                                 ([""], False, ""), ([behind, gone], True, behind))):
        sweeper = Sweeper(p, SweepLayout(tmp_path / str(case)),
                          SweepResult(profile="s", sweep_id="x", axes={}), quiet=True)
        sweeper.layout.dir.mkdir(parents=True)
        asked: list[float | None] = []
        queue = [SweepPoint(index=1, config="c", levels=spec.levels, status="failed", why=r) if r == gone else row(r)
                 for r in runs]

        def run(spec, index, began, duration_s, queue=queue, asked=asked):
            asked.append(duration_s)
            return queue.pop(0)

        sweeper._run = run  # type: ignore[method-assign]
        sweeper.point(spec, 1, None)
        point = sweeper.result.points[-1]
        assert asked == [None] * len(runs) and not queue, asked  # the same length, once at most
        assert (point.generator_rerun, point.generator_limit) == (rerun, limit)
        assert ("the generator fell behind" in _status(point)) == bool(limit)
        assert len(answers.frontier([point])) == (0 if limit else 1)
        # a run again that fails (a server gone) leaves the point its run before, saying so
        assert point.status == "done" and point.why == (f"its run again failed: {gone}" if gone in runs else "")
        assert (gone in _status(point)) == (gone in runs)


def test_a_point_whose_longer_run_fails_keeps_its_shorter_run_and_says_why(tmp_path):
    """extend_s: the longer run of an undecided point fails (its server gone) — the point keeps the shorter run's
    numbers and tiers (undecided), its why saying the run again failed, no shorter run listed as replaced."""
    from tailrace.contract.layout import SweepLayout
    from tailrace.contract.summary.sweep import SweepResult
    from tailrace.sweep import Sweeper

    p = plan(GRID.replace("repeats = 2", "repeats = 2\nextend_s = 60"))
    spec = p.specs()[0]
    sweeper = Sweeper(p, SweepLayout(tmp_path), SweepResult(profile="s", sweep_id="x", axes={}), quiet=True)
    queue = [SweepPoint(index=1, config="c", levels=spec.levels, load=4.0, tiers={"interactive": "undecided"},
                        duration_s=5.0, to_decide_s=7.0),
             SweepPoint(index=1, config="c", levels=spec.levels, status="failed", why="server exited (code 1)")]
    asked: list[float | None] = []

    def run(spec, index, began, duration_s):
        asked.append(duration_s)
        return queue.pop(0)

    sweeper._run = run  # type: ignore[method-assign]
    sweeper.point(spec, 1, None)
    point = sweeper.result.points[-1]
    assert asked == [None, 10.0] and point.status == "done" and point.duration_s == 5.0
    assert point.tiers == {"interactive": "undecided"} and point.extended_from_s == []
    assert point.why == "its run again failed: server exited (code 1)"


def test_a_figure_with_nothing_to_draw_is_not_written_and_the_page_says_so(tmp_path):
    """Points that measured no percentile (failed, or too short) draw no latency curve and no frontier: no empty
    .svg file beside the page, which says what is missing; one point that did draws its curve."""
    from tailrace.contract.layout import SweepLayout
    from tailrace.contract.summary.sweep import SweepResult
    from tailrace.sweep_report import write_sweep_report

    layout = SweepLayout(tmp_path)
    failed = SweepPoint(index=1, config="c", levels={"rate": 4}, load=4.0, status="failed", why="server never ready")
    bare = SweepPoint(index=2, config="c", levels={"rate": 8}, load=8.0, duration_s=5.0)
    write_sweep_report(layout, SweepResult(profile="s", sweep_id="x", axes={}, points=[failed, bare]))
    page = layout.page.read_text()
    assert "no point measured a percentile" in page and "no streamed points" in page
    assert not layout.figure("latency_vs_load").exists() and not layout.figure("frontier").exists()
    bare.latency_ms = {"p50": Estimate(value=12.0, ci_low=11.0, ci_high=13.0)}
    write_sweep_report(layout, SweepResult(profile="s", sweep_id="x", axes={}, points=[failed, bare]))
    assert layout.figure("latency_vs_load").read_text().startswith("<svg")
    assert "no point measured a percentile" not in layout.page.read_text()
