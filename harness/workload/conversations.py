"""Multi-turn sessions as a client sends them: each session's script (its turns' user texts, max_tokens, the data's
replies and pauses), and the conversation so far, from which each turn's request is built at its send.

Scripts come from the profile (synthetic: seeded by the run's seed and the session's id, so two runs of one seed send
the same sessions), from a ShareGPT file (every human turn in order; the file's reply lengths as max_tokens; its
replies for `history = "recorded"`), or from a sessionized JSONL file (one turn a line: `session_id`, and `text` or
`input_tokens`, `output_tokens`, `delay` — the pause before the turn, s — or `timestamp`; the shape aiperf's and
inference-perf's conversation replays take). Bad lines are a SessionFileError naming the file and the line.

A turn carries the conversation so far: chat — the messages, with the server's actual replies (the text it
streamed) or the recorded ones; completions — the previous prompt, the reply and the new user text, one after
another. A prompt over the context limit ends the session, or drops the oldest turns (declared and counted).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson

from tailrace.contract.profile import Prompts, Sessions
from tailrace.contract.profile.grading import Graded
from tailrace.harness.client.apis import BodyAsk, body_extra
from tailrace.harness.client.apis.openai_responses import responses_body
from tailrace.harness.client.generative import request_body
from tailrace.harness.client.tokenizer import PromptTokenizer
from tailrace.harness.workload.graders import load_grader
from tailrace.harness.workload.prompts import WORDS, draw_counts, json_lines, prompt_tokenizer, sharegpt_conversations

BLOCK_TOKENS = 16  # the prefix cache's block (vLLM's default): the ideal hit counts whole blocks


class SessionFileError(ValueError):
    """A session file that cannot be read, or a line of it that is not a turn."""


@dataclass(frozen=True)
class TurnScript:
    """One turn as the data or the profile gives it."""

    user: str  # the user's new text
    max_tokens: int
    recorded_reply: str | None = None  # the data's reply (history = "recorded")
    think_s: float | None = None  # the data's pause before this turn
    where: str = ""  # the file's line or item it came from (bad data names it)
    reference: Any = None  # a sessionized JSONL turn's "reference" (or "answer"): its reply is graded against it
    line: int = -1  # the file's line it came from (a graded turn's item)


@dataclass(frozen=True)
class SessionScript:
    turns: tuple[TurnScript, ...]


class SyntheticSessions:
    """Sessions drawn from the profile: turn count from sessions.turns, the first turn's text of
    prompts.input_tokens words (the tokenizer's tokens where one is named), later ones of sessions.user_tokens,
    max_tokens from prompts.output_tokens; everything seeded by (seed, session id)."""

    def __init__(self, prompts: Prompts, sessions: Sessions, seed: int, tokenizer: PromptTokenizer | None = None):
        self.prompts, self.sessions, self.seed, self.tokenizer = prompts, sessions, seed, tokenizer
        self.count = 1

    def _text(self, tokens: int, rng: np.random.Generator) -> str:
        if self.tokenizer is not None:
            ids = rng.choice(self.tokenizer.word_ids(), tokens)
            return self.tokenizer.text_of(ids, tokens, rng)[0]
        return words_of(tokens, rng)

    def script(self, session_id: int, sample: int) -> SessionScript:
        rng = np.random.default_rng([self.seed, 3, session_id])
        s, p = self.sessions, self.prompts
        turns = int(draw_counts(s.turns, 1, rng)[0])
        first = int(draw_counts(p.input_tokens, 1, rng)[0])
        later = draw_counts(s.user_tokens or p.input_tokens, turns, rng)
        outputs = draw_counts(p.output_tokens, turns, rng)
        out = []
        for k in range(turns):
            words = first if k == 0 else int(later[k])
            recorded = self._text(int(outputs[k]), rng) if s.history == "recorded" else None
            out.append(TurnScript(self._text(words, rng), int(outputs[k]), recorded))
        return SessionScript(tuple(out))


class FileSessions:
    """Sessions read from a file before the run; session `sample` of the run is script sample % their count."""

    grader = None  # what grades a turn that carries a reference (session_source sets it where one does)

    def __init__(self, scripts: list[SessionScript]) -> None:
        self.scripts = scripts
        self.count = len(scripts)

    def script(self, session_id: int, sample: int) -> SessionScript:
        return self.scripts[sample % len(self.scripts)]


def sharegpt_sessions(path: Path, default_max_tokens: int) -> list[SessionScript]:
    """Every conversation of a ShareGPT file with a human turn: its human turns in order, each with the reply that
    follows it (its length in words as max_tokens; `default_max_tokens` where none follows)."""
    scripts = []
    for n, turns in enumerate(sharegpt_conversations(path, SessionFileError)):
        script, pending, where = [], None, f"item {n}"
        for role, text in turns:
            if role == "user" and text.strip():
                if pending is not None:
                    script.append(TurnScript(pending, default_max_tokens, where=where))
                pending = text
            elif role == "assistant" and pending is not None:
                script.append(TurnScript(pending, max(1, len(text.split())), text, where=where))
                pending = None
        if pending is not None:
            script.append(TurnScript(pending, default_max_tokens, where=where))
        if not script:
            raise SessionFileError(f"{path}: {where}: a conversation with no human turn (nothing to send)")
        scripts.append(SessionScript(tuple(script)))
    if not scripts:
        raise SessionFileError(f"{path}: no conversations")
    return scripts


def _whole(doc: dict, key: str, where: str, minimum: int = 1) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SessionFileError(f"{where}: {key} must be a whole number ≥ {minimum}, got {value!r}")
    return value


def _seconds(doc: dict, key: str, where: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise SessionFileError(f"{where}: {key} must be a number ≥ 0, got {value!r}")
    return float(value)


def jsonl_sessions(path: Path, seed: int, default_max_tokens: int) -> list[SessionScript]:
    """The sessions of a sessionized JSONL file, in the order each first appears; a session's turns in file order.
    `timestamp` (s) gives the pause before a later turn as its difference from the previous turn's; `delay` gives it
    directly. A turn without `text` gets `input_tokens` synthetic words (seeded)."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise SessionFileError(f"{path}: {exc.strerror or exc}") from None
    rng = np.random.default_rng([seed, 4])
    sessions: dict[str, list[TurnScript]] = {}
    last_time: dict[str, float] = {}
    closed: set[str] = set()
    previous = None
    for n, doc in json_lines(path, lines, SessionFileError, 'with "session_id"'):
        where = f"{path}:{n}"
        sid = doc.get("session_id")
        if not isinstance(sid, (str, int)) or isinstance(sid, bool) or sid == "":
            raise SessionFileError(f"{where}: session_id must be a non-empty string or a whole number")
        sid = str(sid)
        if sid != previous and previous is not None:
            closed.add(previous)
        if sid in closed:
            raise SessionFileError(f"{where}: session {sid!r} continues after other sessions' turns (a session's "
                                   "turns must be consecutive lines, in order)")
        previous = sid
        text = doc.get("text")
        if text is not None and (not isinstance(text, str) or not text.split()):
            raise SessionFileError(f"{where}: text must be a non-empty string")
        inputs = _whole(doc, "input_tokens", where)
        if text is None and inputs is None:
            raise SessionFileError(f"{where}: a turn needs text or input_tokens")
        outputs = _whole(doc, "output_tokens", where) or default_max_tokens
        delay, stamp = _seconds(doc, "delay", where), _seconds(doc, "timestamp", where)
        if stamp is not None and sid in last_time:
            if stamp < last_time[sid]:
                raise SessionFileError(f"{where}: timestamp {stamp:g} is before the session's previous turn "
                                       f"({last_time[sid]:g})")
            delay = stamp - last_time[sid] if delay is None else delay
        if stamp is not None:
            last_time[sid] = stamp
        user = text if text is not None else words_of(inputs, rng)
        reply = doc.get("reply") if isinstance(doc.get("reply"), str) else None
        reference = next((doc[k] for k in ("reference", "answer") if doc.get(k) is not None), None)
        sessions.setdefault(sid, []).append(TurnScript(user, outputs, reply, delay if sid in sessions else None,
                                                       f"line {n}", reference, n))
    if not sessions:
        raise SessionFileError(f"{path}: no turns")
    return [SessionScript(tuple(turns)) for turns in sessions.values()]


@dataclass
class Built:
    """A turn's request as built: its body, its prompt's length, and what an unbounded cache would hold of it."""

    body: bytes
    prompt_tokens: int
    ideal_cached: int
    media: tuple[int, int] = (0, 0)  # the images and clips the request carries (in its history too), their bytes


@dataclass
class Conversation:
    """The conversation so far of one session, and the request of its next turn."""

    protocol: str
    model: str
    prompts: Prompts
    sessions: Sessions
    count: Callable[[str], int]  # a text's length: words, or the tokenizer's tokens
    tool_result: Callable[[], str]  # a tool result's text (agents)
    messages: list[dict] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # each message's length
    turn_starts: list[int] = field(default_factory=list)  # where each turn's messages begin
    computed: int = 0  # the last turn's prompt + reply, as the server computed it (its cache holds that)
    dropped_turns: int = 0  # oldest turns dropped to fit the context (truncate)
    media: list[tuple[int, int]] = field(default_factory=list)  # each message's images / clips and their bytes
    response_id: str = ""  # openai-responses with server_state: the last reply's id, which the next turn names
    server_has: int = 0  # and how many of the messages the server keeps under it (the next turn sends the rest)

    def _append(self, message: dict, media: tuple[int, int] = (0, 0)) -> None:
        content = message.get("content") or ""
        self.messages.append(message)
        self.lengths.append(self.count(content if isinstance(content, str) else content[0]["text"]))
        self.media.append(media)

    def next_request(self, turn: TurnScript, pending_tool: str = "", media: list = ()) -> Built | None:
        """The next turn's request (its user text, and `media`'s content parts after it, appended to the history),
        or None: it would exceed the context limit and the session ends there (on_context_limit = "end", or one turn
        alone is over it). Media stay in the history, as a chat client resends them."""
        self.turn_starts.append(len(self.messages))
        text = (pending_tool + " " + turn.user) if pending_tool else turn.user
        content = [{"type": "text", "text": text}, *(m.part for m in media)] if media else text
        self._append({"role": "user", "content": content}, (len(media), sum(m.size for m in media)))
        limit = self.sessions.context_tokens
        truncated = False
        while limit is not None and sum(self.lengths) + turn.max_tokens > limit:
            if self.sessions.on_context_limit == "end" or len(self.turn_starts) < 2:
                return None
            cut = self.turn_starts[1]  # drop the oldest turn: its user message, reply and tool result
            del self.messages[:cut], self.lengths[:cut], self.media[:cut]
            self.turn_starts = [s - cut for s in self.turn_starts[1:]]
            self.dropped_turns += 1
            truncated = True
        prompt_tokens = sum(self.lengths)
        ideal = 0 if truncated else min(self.computed, prompt_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS
        spec = self.prompts  # completions: the messages' contents one after another (request_body)
        if self.sessions.server_state:  # Responses: only what the server does not keep, naming what it does
            new = self.messages[self.server_has:] if self.response_id else self.messages
            ask = BodyAsk(self.model, new, turn.max_tokens, spec.ignore_eos, spec.stream, spec.min_tokens)
            extra = body_extra(self.protocol, spec)
            doc = responses_body(ask, previous_response_id=self.response_id, store=True)
            body = orjson.dumps(doc | extra if extra else doc)
        else:
            body = request_body(self.protocol, self.model, self.messages, turn.max_tokens, spec.ignore_eos,
                                spec.stream, min_tokens=spec.min_tokens, extra=body_extra(self.protocol, spec))
        return Built(body, prompt_tokens, max(0, ideal), (sum(c for c, _ in self.media), sum(b for _, b in self.media)))

    def add_reply(self, turn: TurnScript, text: str, tool_calls: list, replied: bool, response_id: str = "") -> str:
        """The turn's reply into the history (the server's text, or the data's under history = "recorded"); the
        text of a tool result the next turn carries ('' unless sessions.tool_result_tokens). `response_id`: the
        reply's, which the next turn names where the server keeps the conversation (sessions.server_state; a failed
        turn has none: the next one sends the whole conversation again)."""
        reply = turn.recorded_reply if self.sessions.history == "recorded" and turn.recorded_reply is not None \
            else text
        prompt_tokens = sum(self.lengths)
        message: dict = {"role": "assistant", "content": reply}
        if tool_calls:
            message["tool_calls"] = [{"id": c["id"] or f"call_{i}", "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for i, c in enumerate(tool_calls)]
        self._append(message)
        self.response_id, self.server_has = response_id, len(self.messages)
        # what the server computed (and may cache): the prompt and the reply it generated
        self.computed = prompt_tokens + (self.count(text) if replied else 0)
        if not self.sessions.tool_result_tokens:
            return ""
        result = self.tool_result()
        if tool_calls:
            self._append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": result})
            return ""
        return result  # no tool call to answer: the result goes before the next user text


def words_of(n: int, rng: np.random.Generator) -> str:
    """n seeded words of the synthetic vocabulary."""
    return " ".join([WORDS[i] for i in rng.integers(0, len(WORDS), n).tolist()])



def session_source(endpoint, seed: int, data_root: Path):
    """(the sessions of a session endpoint — its prompt file's, else drawn —, a text's length function: the
    tokenizer's tokens where prompts.tokenizer names one, else words). Bad data: SessionFileError / PromptFileError
    naming the file and line, before anything is sent."""
    spec, sessions = endpoint.prompts or Prompts(), endpoint.sessions
    tokenizer = prompt_tokenizer(endpoint, data_root)
    count = tokenizer.count if tokenizer is not None else (lambda text: len(text.split()))
    if spec.file is None:
        return SyntheticSessions(spec, sessions, seed, tokenizer), count
    path = Path(spec.file) if Path(spec.file).is_absolute() else data_root / spec.file
    default_max = int(spec.output_tokens.mean)
    fmt = spec.format if spec.format != "auto" else ("sharegpt" if path.suffix.lower() == ".json" else "jsonl")
    scripts = sharegpt_sessions(path, default_max) if fmt == "sharegpt" else jsonl_sessions(path, seed, default_max)
    limit = sessions.context_tokens
    if limit is not None:
        for n, script in enumerate(scripts):
            for turn in script.turns:
                if count(turn.user) + turn.max_tokens > limit:
                    raise SessionFileError(f"{path}: {turn.where or f'session {n}'}: one turn asks "
                                           f"{count(turn.user)} + {turn.max_tokens} tokens, over sessions."
                                           f"context_tokens {limit}")
    if sessions.think_s.distribution == "data" and not any(t.think_s is not None for s in scripts for t in s.turns):
        raise SessionFileError(f"{path}: sessions.think_s is \"data\" but no turn gives a delay or timestamp")
    source = FileSessions(scripts)
    if any(turn.reference is not None for script in scripts for turn in script.turns):
        try:
            source.grader = load_grader(sessions.grader, Graded(file=spec.file, grader=sessions.grader), data_root)
        except ValueError as exc:
            raise SessionFileError(f"sessions.grader: {exc}") from None
    return source, count
