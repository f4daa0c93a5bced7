"""What a pooling endpoint is sent, each body encoded before the run and the same on every worker (drawn from the
run's seed). Embeddings: its texts (the endpoint's `prompts` — drawn of their lengths in words or the tokenizer's
tokens, or read from a file) in requests of `embeddings.inputs` texts each. Rerank: a query (its `prompts`) and
`rerank.documents` documents of `rerank.document_tokens` each, or a RAG file's lines (a query and its candidates)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from tailrace.contract.profile import Embeddings, Endpoint, Prompts, Rerank
from tailrace.harness.client.pooling import PoolingBody
from tailrace.harness.workload.prompts import (
    PromptFileError,
    data_path,
    draw_counts,
    json_lines,
    prompt_items,
    prompt_tokenizer,
    prompts_of_lengths,
)

BATCH_STREAM = 3  # the seed's stream for batch sizes (prompts draw theirs from the seed itself)
DOCUMENT_STREAM = 4  # the seed's stream for rerank documents
DOCUMENT_KEYS = ("documents", "passages", "candidates")


def prompt_text(prompt: str | list) -> str:
    """A prompt as one text (chat messages from a file: their contents, one after another)."""
    return prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)


def embedding_bodies(endpoint: Endpoint, seed: int, data_root: Path) -> list[PoolingBody]:
    """One body per distinct request (prompts.count of them; a file's prompts: one request per text at batch 1, or
    as many as its texts fill): `input` one text, or a list of texts, taken in turn from the endpoint's prompts."""
    spec, asked = endpoint.embeddings or Embeddings(), endpoint.prompts or Prompts()
    texts = [prompt_text(p) for p, *_ in prompt_items(endpoint, seed, data_root)]
    sizes = draw_counts(spec.inputs, max(asked.count, 1), np.random.default_rng([seed, BATCH_STREAM]))
    single = spec.inputs.distribution == "fixed" and spec.inputs.mean == 1  # `input` as a text, not a list
    bodies, at = [], 0
    for size in sizes.tolist():
        batch = [texts[(at + k) % len(texts)] for k in range(size)]
        at = (at + size) % len(texts)
        bodies.append(embedding_body(endpoint, batch, as_list=not single))
    return bodies


def rag_file(path: Path) -> list[tuple[str, list[str]]]:
    """(query, its candidate documents) of each line of a RAG JSONL file: {"query": …, "documents": […]} (or
    "passages" / "candidates"; a document a text or {"text": …}, as MS MARCO / BEIR exports write them);
    PromptFileError names the file and line of a bad one."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    out = []
    for n, doc in json_lines(path, lines, PromptFileError, 'with "query" and "documents"'):
        query = doc.get("query")
        if not isinstance(query, str) or not query.strip():
            raise PromptFileError(f"{path}:{n}: query: must be a non-empty text")
        key = next((k for k in DOCUMENT_KEYS if k in doc), None)
        found = doc.get(key) if key else None
        if not isinstance(found, list) or not found:
            raise PromptFileError(f"{path}:{n}: no candidates (a non-empty \"documents\", \"passages\" or "
                                  "\"candidates\" list)")
        texts = [d.get("text") if isinstance(d, dict) else d for d in found]
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
        if bad is not None:
            raise PromptFileError(f"{path}:{n}: {key}[{bad}]: must be a non-empty text (or {{\"text\": …}})")
        out.append((query, texts))
    if not out:
        raise PromptFileError(f"{path}: no queries")
    return out


def rerank_items(endpoint: Endpoint, seed: int, data_root: Path) -> list[tuple[str, list[str]]]:
    """(query, documents) of each distinct request: the RAG file's lines, or prompts.count drawn queries, each with
    `documents` drawn documents of `document_tokens` each."""
    spec = endpoint.rerank or Rerank()
    if spec.file is not None:
        return rag_file(data_path(spec.file, data_root))
    queries = [prompt_text(p) for p, *_ in prompt_items(endpoint, seed, data_root)]
    rng = np.random.default_rng([seed, DOCUMENT_STREAM])
    counts = draw_counts(spec.documents, len(queries), rng)
    lengths = draw_counts(spec.document_tokens, int(counts.sum()), rng)
    texts = [t for t, _ in prompts_of_lengths(Prompts(), lengths, np.ones_like(lengths), rng,
                                              prompt_tokenizer(endpoint, data_root))]
    out, at = [], 0
    for query, n in zip(queries, counts.tolist()):
        out.append((query, texts[at:at + n]))
        at += n
    return out


def rerank_body(endpoint: Endpoint, query: str, documents: list[str]) -> PoolingBody:
    """A query and its documents in the shape of the endpoint's rerank API."""
    spec = endpoint.rerank or Rerank()
    if spec.api == "tei":
        body: dict = {"query": query, "texts": documents, "return_text": False}
    elif spec.api == "score":
        body = {"model": endpoint.model, "text_1": query, "text_2": documents}
    else:
        body = {"model": endpoint.model, "query": query, "documents": documents, "return_documents": False}
        if spec.top_n is not None:
            body["top_n"] = spec.top_n
    return PoolingBody(orjson.dumps(body), len(documents))


def embedding_body(endpoint: Endpoint, texts: list[str], as_list: bool = False) -> PoolingBody:
    """Texts to embed in one request (`input` one text when there is one, unless `as_list`), the endpoint's
    encoding and dimension."""
    spec = endpoint.embeddings or Embeddings()
    body: dict = {"model": endpoint.model, "input": texts[0] if len(texts) == 1 and not as_list else texts,
                  "encoding_format": spec.encoding_format}
    if spec.dimensions is not None:
        body["dimensions"] = spec.dimensions
    return PoolingBody(orjson.dumps(body), len(texts))


def rerank_bodies(endpoint: Endpoint, seed: int, data_root: Path) -> list[PoolingBody]:
    """One body per (query, documents), in the shape of the endpoint's rerank API."""
    return [rerank_body(endpoint, query, documents) for query, documents in rerank_items(endpoint, seed, data_root)]


def pooling_bodies(endpoint: Endpoint, seed: int, data_root: Path) -> list[PoolingBody]:
    """A pooling endpoint's bodies (the endpoint check reads them too: a bad file stops the run before it starts)."""
    return rerank_bodies(endpoint, seed, data_root) if endpoint.protocol == "rerank" else \
        embedding_bodies(endpoint, seed, data_root)
