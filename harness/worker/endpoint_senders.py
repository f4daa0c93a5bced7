"""The worker's senders, one per endpoint of the plan, built before the run: KServe senders from their samples
(harness/client/senders.py), embeddings ones from their texts (harness/workload/pooling_requests.py), generative
ones from their prompts — drawn, read from a file, a trace's rows (each
built ahead of its send: harness/workload/trace_prompts.py) or a session endpoint's turns (harness/worker/chains/sessions.py);
and `RequestBuilds`, what the issue loop builds ahead for an arrival (harness/worker/build_ahead.py)."""
from __future__ import annotations

from pathlib import Path

from tailrace.contract.plan import PoolLimits, RunPlan
from tailrace.contract.profile import Endpoint
from tailrace.contract.requests import scenario_request
from tailrace.harness.client.payloads import wanted_outputs
from tailrace.harness.client.request_data import samples_for
from tailrace.harness.client.senders import Sender
from tailrace.harness.client.tokenizer import TokenCounter
from tailrace.harness.worker.arrivals import Arrival
from tailrace.harness.worker.chains.pipelines import PipelineRunner
from tailrace.harness.worker.chains.sessions import SessionEndpoint, SessionRunner
from tailrace.harness.worker.identity import WorkerIdentity
from tailrace.harness.workload.conversations import session_source
from tailrace.harness.workload.graded_items import endpoint_prompts
from tailrace.harness.workload.media import MediaPrompts, carries_media
from tailrace.harness.workload.pipeline_requests import PipelineRequests
from tailrace.harness.workload.prompts import prompt_tokenizer, token_counter, trace_items
from tailrace.harness.workload.senders import generative_sender, kserve_sender, pooling_sender, stream_sender
from tailrace.harness.workload.trace_prompts import TracePrompts
from tailrace.harness.workload.traces import TraceRows, replay
from tailrace.harness.workload.turns import Build, PreparedRequest, Turn


class EndpointSenders:
    """Builds every endpoint's sender for one worker; keeps what the issue loop needs besides them: the session
    endpoints' sources and the trace-driven endpoints' prompts (by endpoint index)."""

    def __init__(self, plan: RunPlan, identity: WorkerIdentity, region: str, models_dir: Path,
                 trace: TraceRows | None) -> None:
        self.plan, self.identity, self.region, self.models_dir, self.trace = plan, identity, region, models_dir, trace
        self.profile = plan.profile
        self.root = Path(plan.data_root or ".")
        self.session_endpoints: dict[int, SessionEndpoint] = {}
        self.trace_prompts: dict[int, TracePrompts] = {}

    def all(self) -> list[Sender]:
        """One sender per endpoint, its requests encoded from its samples (read and checked here, once)."""
        stride = self.plan.samples_per_request if self.profile.load.scenario == "offline" else 1
        pool = self.plan.pool_limits
        overrides = self.identity.endpoint_urls or {}
        senders = []
        for ep in self.profile.endpoints:
            url = overrides.get(ep.name) or self.plan.endpoint_url(self.region, ep)
            if ep.generative:
                senders.append(self._generative(ep, url, pool))
                continue
            if ep.pooling:
                senders.append(pooling_sender(ep, url, pool, self.profile.load.seed, self.root))
                continue
            request = self.plan.requests.get(ep.name)
            if request is None:
                raise RuntimeError(f"endpoint {ep.name}: the run plan has no resolved request (the orchestration "
                                   f"checks every endpoint before the start)")
            request = scenario_request(request, self.plan.batch_size(ep))
            samples = samples_for(self.plan, ep, request)
            senders.append(kserve_sender(ep, url, samples, request, stride, pool, self.models_dir,
                                         wanted_outputs(ep.check, samples)))
        return senders

    def pipelines(self) -> dict[int, PipelineRequests]:
        """Each pipeline's stages and items, by its arrival index (after the endpoints'). A bad RAG file is a
        PromptFileError naming it and the line."""
        n, seed = len(self.profile.endpoints), self.profile.load.seed
        inputs = {name: tuple(v) for name, v in self.plan.model_inputs.items()}
        return {n + i: PipelineRequests(p, self.profile, seed, self.root, inputs)
                for i, p in enumerate(self.profile.pipelines)}

    def _generative(self, ep: Endpoint, url: str, pool: PoolLimits) -> Sender:
        """A generative endpoint's sender, its prompts drawn from the run's seed (the same on every worker) or read
        from its prompt file (on this worker's host, relative to where it runs)."""
        inputs = tuple(self.plan.model_inputs.get(ep.name, ()))
        seed, trace = self.profile.load.seed, self.trace
        if ep.sessions is not None:
            source, count = session_source(ep, seed, self.root)
            media = MediaPrompts(ep, seed, self.root) if carries_media(ep) else None
            self.session_endpoints[self.profile.endpoints.index(ep)] = SessionEndpoint(ep, source, count, media)
            return stream_sender(ep, url, pool, [], samples=source.count)
        by_row = trace is not None and (trace.input_tokens is not None or trace.output_tokens is not None
                                        or trace.hash_ids is not None)
        if by_row and ep.protocol != "kserve-grpc-stream":
            return self._trace(ep, url, pool, inputs)
        graded = None
        if by_row:
            items = trace_items(ep, trace.input_tokens, trace.output_tokens, seed, self.root)
        else:
            items, graded = endpoint_prompts(ep, seed, self.root)
        sender = generative_sender(ep, url, items, seed, self.root, inputs, pool, token_counter(ep, items, self.root))
        sender.graded = graded  # what grades each body's reply (None: none graded): the request path grades
        return sender

    def _trace(self, ep: Endpoint, url: str, pool: PoolLimits, model_inputs: tuple[str, ...]) -> Sender:
        """A trace-driven endpoint's sender: each row's body built ahead of its send (TracePrompts)."""
        load, trace = self.profile.load, self.trace
        order, _ = replay(trace, load.arrivals.trace, load.warmup_s + load.duration_s)
        tokenizer = prompt_tokenizer(ep, self.root)
        prompts = TracePrompts(ep, trace.input_tokens, trace.output_tokens, trace.hash_ids, order, load.seed,
                               model_inputs, tokenizer)
        self.trace_prompts[self.profile.endpoints.index(ep)] = prompts
        counter = TokenCounter(tokenizer, prompts.inputs.tolist()) if tokenizer is not None else None
        return stream_sender(ep, url, pool, [], samples=len(prompts), counter=counter)


class RequestBuilds:
    """What an arrival is sent with, as a build the issue loop runs in its gaps before the arrival's instant
    (harness/worker/build_ahead.py): a session's script and first request, a pipeline's first stage, a trace row's
    request; else the arrival itself."""

    def __init__(self, sessions: SessionRunner, trace_prompts: dict[int, TracePrompts],
                 pipelines: PipelineRunner) -> None:
        self.sessions, self.trace_prompts, self.pipelines = sessions, trace_prompts, pipelines

    def __call__(self, arrival: Arrival) -> Build | Arrival:
        if self.sessions.handles(arrival):
            return self.sessions.build(arrival)
        if self.pipelines.handles(arrival):
            return self.pipelines.build(arrival)
        prompts = self.trace_prompts.get(arrival.endpoint)
        return arrival if prompts is None else self._trace_row(arrival, prompts)

    @staticmethod
    def _trace_row(arrival: Arrival, prompts: TracePrompts) -> Build:
        body = yield from prompts.build(arrival.sample)
        return PreparedRequest(arrival, Turn.sessionless(body, *prompts.facts(arrival.sample), arrival.sample))
