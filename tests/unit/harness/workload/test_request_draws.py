"""Declared cancellations (harness/workload/cancellations.py, the profile's `cancel`): which requests are abandoned
and when, drawn from the seed and each request's place in the arrival process; bad declarations refused in one
line naming the field."""
from __future__ import annotations

import numpy as np
import pytest

from tailrace.contract.profile import Cancel, ProfileError, parse_profile
from tailrace.harness.workload.request_draws import CancelPlan


def test_the_declared_share_is_drawn_the_same_for_the_same_request_in_every_run():
    spec = Cancel(share=0.3, after="first_token")
    a, b = CancelPlan(spec, 7, 0), CancelPlan(spec, 7, 0)
    drawn = [a.draw(i, 0, 0) for i in range(20_000)]
    assert drawn == [b.draw(i, 0, 0) for i in range(20_000)]
    share = np.mean([d is not None for d in drawn])
    assert abs(share - 0.3) < 0.015, share  # 20,000 draws: 4.6 standard deviations
    assert {d.kind for d in drawn if d} == {"first_token"} and {d.tokens for d in drawn if d} == {1}
    # another seed, another endpoint, another turn: other requests
    for other in (CancelPlan(spec, 8, 0), CancelPlan(spec, 7, 1)):
        assert [other.draw(i, 0, 0) is None for i in range(2000)] != [d is None for d in drawn[:2000]]
    assert [a.draw(i, 2, 0) is None for i in range(2000)] != [d is None for d in drawn[:2000]]
    assert all(CancelPlan(Cancel(share=1.0, after="first_token"), 7, 0).draw(i, 0, 0) for i in range(1000))


def test_a_drawn_time_counts_from_the_intended_send_and_follows_its_distribution():
    spec = Cancel(share=1.0, after="time", after_ms={"mean": 300, "distribution": "uniform", "min": 100, "max": 500})
    plan = CancelPlan(spec, 3, 0)
    at = np.array([plan.draw(i, 0, 10**12).deadline_ns - 10**12 for i in range(5000)]) / 1e6
    assert at.min() >= 100 and at.max() <= 500 and abs(at.mean() - 300) < 10
    tokens = CancelPlan(Cancel(share=1.0, after="tokens", after_tokens=16), 3, 0).draw(5, 1, 0)
    assert (tokens.kind, tokens.deadline_ns, tokens.tokens) == ("tokens", -1, 16)


def _profile(cancel, protocol="openai-chat", **endpoint):
    return parse_profile({"name": "p", "endpoints": [{"name": "e", "url": "http://127.0.0.1:9", "protocol": protocol,
                                                      "model": "m", "cancel": cancel, **endpoint}],
                          "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 10, "duration_s": 5}}, "p.toml")


@pytest.mark.parametrize("cancel, protocol, endpoint, message", [
    ({"share": 0.2, "after": "time"}, "openai-chat", {}, "endpoints[0].cancel: after_ms goes with"),
    ({"share": 0.2, "after": "first_token", "after_tokens": 4}, "openai-chat", {}, "after_tokens goes with"),
    ({"share": 1.5, "after": "first_token"}, "openai-chat", {}, "endpoints[0].cancel.share"),
    ({"share": 0.2, "after": "soon"}, "openai-chat", {}, "endpoints[0].cancel.after"),
    ({"share": 0.2, "after": "first_token"}, "kserve-http", {},
     "cancel: for openai-chat, openai-completions, anthropic-messages, openai-responses and triton-generate endpoints"),
    ({"share": 0.2, "after": "first_token"}, "openai-chat", {"prompts": {"stream": False}}, "cancel: for streamed"),
])
def test_a_bad_cancel_is_refused_in_one_line_naming_its_field(cancel, protocol, endpoint, message):
    with pytest.raises(ProfileError) as err:
        _profile(cancel, protocol, **endpoint)
    assert message in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)


def test_a_model_mix_draws_by_weight_per_request_or_per_session():
    from tailrace.contract.profile import ModelShare
    from tailrace.harness.workload.request_draws import ModelMix

    models = [ModelShare(name="base", weight=2), ModelShare(name="lora-a"), ModelShare(name="lora-b")]
    mix = ModelMix(models, 5, 0, per_session=False)
    drawn = [mix.draw(i, 0) for i in range(30_000)]
    shares = {n: drawn.count(n) / len(drawn) for n in ("base", "lora-a", "lora-b")}
    assert abs(shares["base"] - 0.5) < 0.015 and abs(shares["lora-a"] - 0.25) < 0.015, shares
    assert drawn == [ModelMix(models, 5, 0, per_session=False).draw(i, 0) for i in range(30_000)]
    assert [mix.draw(7, turn) for turn in range(1, 40)] != [mix.draw(7, 1)] * 39  # per request: turns differ
    session = ModelMix(models, 5, 0, per_session=True)
    assert all(len({session.draw(i, turn) for turn in range(1, 9)}) == 1 for i in range(200))


@pytest.mark.parametrize("endpoint, message", [
    ({"protocol": "openai-chat", "model": [{"name": "a", "weight": 0}]}, "endpoints[0].model[0].weight"),
    ({"protocol": "openai-chat", "model": [{"name": "a"}, {"name": "a"}]}, "'a' is listed twice"),
    ({"protocol": "openai-chat", "model": []}, "model: an empty list"),
    ({"protocol": "kserve-http", "model": [{"name": "a"}]}, "model (a weighted list): for openai-chat"),
    ({"protocol": "openai-chat", "model": "a", "model_draw": "session"}, "model_draw = \"session\": for an endpoint"),
])
def test_a_bad_model_mix_is_refused_in_one_line(endpoint, message):
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "p", "endpoints": [{"name": "e", "url": "http://127.0.0.1:9", **endpoint}],
                       "regions": [{"name": "r", "share": 1.0}], "load": {"rate": 10, "duration_s": 5}}, "p.toml")
    assert message in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)


def test_an_slo_names_a_model_of_its_endpoints_mix():
    endpoint = {"name": "e", "url": "http://127.0.0.1:9", "protocol": "openai-chat",
                "model": [{"name": "base"}, {"name": "lora-a"}]}

    def profile(slo):
        return parse_profile({"name": "p", "endpoints": [endpoint], "regions": [{"name": "r", "share": 1.0}],
                              "load": {"rate": 10, "duration_s": 5}, "slos": [slo]}, "p.toml")

    assert profile({"metric": "ttft", "percentile": 90, "threshold_ms": 300, "endpoint": "e", "model": "lora-a"})
    with pytest.raises(ProfileError, match="slos\\[0\\].model: names a model of the named endpoint's model list"):
        profile({"metric": "ttft", "percentile": 90, "threshold_ms": 300, "endpoint": "e", "model": "lora-z"})
    with pytest.raises(ProfileError, match="slos\\[0\\].model"):
        profile({"metric": "error_rate", "threshold": 0.01, "endpoint": "e", "model": "lora-a"})
