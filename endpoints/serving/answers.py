"""Scripted answers: the embedded synthetic_lm answering graded items, right with a known probability that falls as
its batch fills, and keeping its own record of which it got right.

The run hands the server an answer key (each graded prompt's text → the kind of answer and its reference). A request
whose prompt is in the key gets, after `answer_after_tokens` tokens of the model's usual walk (its "reasoning"),
the answer words and then the end of sequence: the reference where a draw — from a hash of the seed and the
request's trace ID, so the same request is answered the same way in every run — falls below
p = max(floor, correct − fall_per_seq × (batch − 1)), the batch counted at the answer's first token; else a wrong
answer of the same kind. A max_tokens shorter than the reply cuts it (finish reason length). Each decision is one
JSON line of the server's answers file: {trace_id, batch, p, correct}.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tailrace.contract.internal_processes import AnswerModel
from tailrace.endpoints.models.vocabulary import EOS

SCRIPT_BASE = 1 << 30  # a scripted word's token id: SCRIPT_BASE + its place in the reply
FOUND_LIMIT = 65_536  # texts remembered with the key entry found in them


def _words(kind: str, reference: str, right: bool) -> list[str]:
    """The answer's words: the reference's, or a wrong answer of its kind."""
    if kind == "number":
        value = float(reference)
        if not right:
            value += 1
        shown = str(int(value)) if value == int(value) else f"{value:g}"
        return ["The", "answer", "is", "####", shown]
    if kind == "letter":
        letter = reference.strip().upper()[:1] or "A"
        if not right:
            letter = "ABCD"[("ABCD".index(letter) + 1) % 4] if letter in "ABCD" else "A"
        return ["The", "answer", "is", f"({letter})."]
    return reference.split() if right else ["none", "of", "these"]


@dataclass
class Script:
    """One graded request's reply: decided at its first token, then its words in turn, then the end."""

    kind: str
    reference: str
    trace_id: str
    model: "ScriptedAnswers"
    words: list[str] = field(default_factory=list)

    def token(self, position: int, batch: int, walked: int) -> int:
        """The token at `position` of the reply (`walked`: the model's own next token)."""
        after = self.model.settings.answer_after_tokens
        if position == 0:
            self.words = self.model.decide(self, batch)
        if position < after:
            return walked if walked != EOS else 1
        at = position - after
        return SCRIPT_BASE + at if at < len(self.words) else EOS

    def piece(self, token: int, vocabulary_piece: Callable[[int], str]) -> str:
        return " " + self.words[token - SCRIPT_BASE] if token >= SCRIPT_BASE else vocabulary_piece(token)


class ScriptedAnswers:
    """One model's answer key and accuracy model (contract/internal_processes.py AnswerModel)."""

    def __init__(self, settings: AnswerModel) -> None:
        self.settings = settings
        key = json.loads(Path(settings.key_file).read_text())
        self.key: dict[str, tuple[str, str]] = {k: (v["kind"], str(v["reference"])) for k, v in key.items()}
        self._found: dict[str, tuple[str, str] | None] = {}
        self._lock = threading.Lock()
        self._log = open(settings.answers_file, "a", buffering=1) if settings.answers_file else None  # noqa: SIM115

    def script_for(self, text: str, trace_id: str) -> Script | None:
        """A graded prompt's script (None: the prompt is not in the key)."""
        found = self.key.get(text)
        if found is None:
            if text not in self._found:  # a chat's text holds the prompt among its messages: looked up once
                if len(self._found) >= FOUND_LIMIT:  # (sessions' growing texts: the memo stays bounded)
                    self._found.clear()
                at = max(((text.rfind(k), v) for k, v in self.key.items() if k in text), default=None,
                         key=lambda found: found[0])  # the last one: a conversation's newest turn
                self._found[text] = at[1] if at is not None else None
            found = self._found[text]
        return None if found is None else Script(found[0], found[1], trace_id, self)

    def probability(self, batch: int) -> float:
        s = self.settings
        return max(s.floor, s.correct - s.fall_per_seq * max(0, batch - 1))

    def decide(self, script: Script, batch: int) -> list[str]:
        p = self.probability(batch)
        digest = hashlib.blake2b(f"{self.settings.seed}:{script.trace_id}".encode(), digest_size=8).digest()
        right = int.from_bytes(digest, "big") / 2**64 < p
        if self._log is not None:
            with self._lock:
                self._log.write(json.dumps({"trace_id": script.trace_id, "batch": batch, "p": round(p, 6),
                                            "correct": right}) + "\n")
        return _words(script.kind, script.reference, right)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
