"""Pipelines in a profile (contract/profile/): stages over the profile's endpoints, checked before anything is
sent — an unknown endpoint, one of the wrong kind, a stage after the answer, an idle endpoint of weight 0, pipeline
SLOs without a pipeline — each one line naming the field."""
from __future__ import annotations

import pytest

from tailrace.contract.profile import ProfileError, parse_profile

EMBED = {"name": "embed", "url": "http://127.0.0.1:9", "protocol": "openai-embeddings", "model": "m", "weight": 0}
RERANK = {"name": "rerank", "url": "http://127.0.0.1:9", "protocol": "rerank", "model": "m", "weight": 0}
CHAT = {"name": "chat", "url": "http://127.0.0.1:9", "protocol": "openai-chat", "model": "m"}
KSERVE = {"name": "mlp", "url": "http://127.0.0.1:9", "protocol": "kserve-http", "model": "m"}
RAG = {"name": "rag", "weight": 2, "stages": [{"endpoint": "embed"}, {"endpoint": "rerank", "pause_ms": 15, "top_n": 3},
                                              {"endpoint": "chat"}]}


def profile(endpoints=(EMBED, RERANK, CHAT), pipelines=(RAG,), slos=(), **load):
    return parse_profile({"name": "p", "endpoints": list(endpoints), "regions": [{"name": "r", "share": 1.0}],
                          "load": {"rate": 10, "duration_s": 5, **load}, "pipelines": list(pipelines),
                          "slos": list(slos)}, "p.toml")


def test_a_rag_pipeline_splits_the_arrivals_with_the_endpoints():
    p = profile(slos=[{"metric": "pipeline_e2e", "pipeline": "rag", "percentile": 95, "threshold_ms": 900},
                      {"metric": "pipeline_ttft", "percentile": 95, "threshold_ms": 400}])
    assert p.arrival_weights == (0, 0, 1, 2)  # the endpoints', then the pipeline's
    assert p.stage_endpoints() == {"embed", "rerank", "chat"}
    assert p.pipelines[0].stages[1].pause_ms == 15 and p.pipelines[0].stages[1].top_n == 3


@pytest.mark.parametrize("endpoints, pipelines, slos, load, message", [
    ((EMBED, RERANK, CHAT), [{**RAG, "stages": [{"endpoint": "embedder"}]}], (), {},
     "pipelines[0].stages[0].endpoint: no endpoint named 'embedder'"),
    ((EMBED, KSERVE, CHAT), [{**RAG, "stages": [{"endpoint": "mlp"}]}], (), {},
     "pipelines[0].stages[0].endpoint: 'mlp' speaks kserve-http; a stage embeds"),
    ((EMBED, RERANK, CHAT), [{**RAG, "stages": [{"endpoint": "chat"}, {"endpoint": "rerank"}, {"endpoint": "embed"}]}],
     (), {}, "pipelines[0].stages[0].endpoint: a generate stage ends its pipeline (nothing reads its answer)"),
    ((EMBED, RERANK, CHAT), [{**RAG, "stages": [{"endpoint": "embed"}, {"endpoint": "chat"}]}], (), {},
     "endpoints: rerank has weight 0 and is no pipeline's stage"),
    ((EMBED, RERANK, CHAT), [{**RAG, "name": "chat"}], (), {}, "pipelines: name(s) chat used twice"),
    ((EMBED, RERANK, CHAT), [RAG], (), {"scenario": "offline"}, "pipelines: need the open-loop server scenario"),
    ((CHAT,), [], [{"metric": "pipeline_e2e", "percentile": 95, "threshold_ms": 900}], {},
     "slos[0].metric: pipeline_e2e needs a [[pipelines]] section"),
    ((EMBED, RERANK, CHAT), [RAG], [{"metric": "pipeline_e2e", "pipeline": "rga", "percentile": 95,
                                      "threshold_ms": 900}], {}, "slos[0].pipeline: no pipeline named 'rga'"),
    ((EMBED, RERANK, CHAT), [RAG], [{"metric": "pipeline_e2e", "endpoint": "chat", "percentile": 95,
                                      "threshold_ms": 900}], {}, "names its pipeline (pipeline = …), not an endpoint"),
    ((EMBED, {**RERANK, "weight": 1}), [{**RAG, "stages": [{"endpoint": "embed"}, {"endpoint": "rerank"}]}],
     [{"metric": "pipeline_ttft", "percentile": 95, "threshold_ms": 900}], {},
     "pipeline_ttft needs a pipeline whose last stage streams its answer"),
    ((EMBED, RERANK, CHAT), [{**RAG, "prompt": "no question here"}], (), {}, "prompt: must hold {query}"),
])
def test_a_wrong_pipeline_is_one_line_naming_the_field(endpoints, pipelines, slos, load, message):
    with pytest.raises(ProfileError) as err:
        profile(endpoints, pipelines, slos, **load)
    assert message in str(err.value) and str(err.value).startswith("p.toml: ")
    assert len(str(err.value).splitlines()) == 1


def test_an_endpoint_of_weight_0_outside_every_pipeline_would_be_sent_nothing():
    with pytest.raises(ProfileError, match="endpoints: embed has weight 0 and is no pipeline's stage"):
        profile((EMBED, CHAT), ())
