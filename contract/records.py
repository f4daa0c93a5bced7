"""The request-log record schema: defined once, used by the recorder and by the analysis.

No heavy imports here: field names, Arrow type names, and the typed rows built from them (a misspelt
field is a TypeError where the row is made, never a silent null column).
"""
from __future__ import annotations

from collections import namedtuple

# (column, arrow type name, meaning)
REQUEST_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("run_id", "string", "run identifier"),
    ("trace_id", "string", "W3C trace ID, 32 hex"),
    ("span_id", "string", "W3C span ID, 16 hex"),
    ("region", "string", "generator region"),
    ("worker", "string", "generator worker"),
    ("endpoint", "string", "profile endpoint name"),
    ("model", "string", "model name"),
    ("protocol", "string", "kserve-http | kserve-grpc | inprocess"),
    ("phase", "int32", "0 = warm-up, then 1.. per rate step"),
    ("sample_index", "int64", "row of the held-out set sent"),
    ("t_intended", "int64", "epoch ns, worker clock: when the schedule says to send"),
    ("t_sent", "int64", "epoch ns, worker clock: when it was sent"),
    ("t_done", "int64", "epoch ns, worker clock: when the response (or error) arrived"),
    ("latency_ns", "int64", "t_done - t_intended (monotonic clock)"),
    ("service_ns", "int64", "t_done - t_sent (what a closed-loop tool would report)"),
    ("send_lag_ns", "int64", "t_sent - t_intended"),
    ("status", "string", "ok | http_error | grpc_error | timeout | connection | bad_response | client_error (not "
                         "sent: the generator could not read the endpoint's credential) | cancelled (abandoned "
                         "by the client as the endpoint's `cancel` declares: t_done is when)"),
    ("code", "string", "HTTP status or gRPC code name; cancelled: time | first_token | tokens (what closed it)"),
    ("error", "string", "short error text"),
    ("server_queue_ns", "int64", "server-reported time in queue (-1 if not reported)"),
    ("server_compute_ns", "int64", "server-reported compute time (-1 if not reported)"),
    ("server_receive_ns", "int64", "server epoch ns at receive, server clock (-1 if not reported)"),
    ("server_send_ns", "int64", "server epoch ns at send, server clock (-1 if not reported)"),
    ("echoed_trace_id", "string", "trace ID the server echoed back ('' if none)"),
    ("label", "int64", "the data's label of the first sample sent (-1 if the data has none)"),
    ("prediction", "int64", "the first row's answer under a label / argmax check (-1 if none)"),
    ("correct", "bool", "every row of the request answered right (False when nothing is checked)"),
    ("batch_size", "int32", "samples in the request (multi-stream queries, offline batches)"),
    ("correct_count", "int32", "rows answered right (labels or validation_data), of batch_size; -1: not checked"),
    ("bytes_out", "int64", "request bytes sent"),
    ("bytes_in", "int64", "response bytes received"),
    ("in_flight", "int32", "requests in flight at send time, this worker"),
    ("clock_offset_ns", "int64", "current estimate of reference - worker clock"),
    ("clock_uncertainty_ns", "int64", "its uncertainty (half the round-trip delay)"),
    # streamed (generative) responses; a one-shot request has the defaults of OPTIONAL_DEFAULTS
    ("t_first_token", "int64", "epoch ns, worker clock: the read that carried the first token (-1: none)"),
    ("t_last_token", "int64", "epoch ns, worker clock: the read that carried the last token (-1: none)"),
    ("ttft_ns", "int64", "t_first_token - t_intended (monotonic clock; -1: no token)"),
    ("output_tokens", "int32", "tokens generated (the server's usage, else the events counted; -1: one-shot)"),
    ("input_tokens", "int32", "prompt tokens from the server's usage (-1: not reported)"),
    ("token_source", "string", "where output_tokens came from: usage (every event) | final_usage | events | ''"),
    ("finish_reason", "string", "the server's finish reason ('' if none)"),
    ("stream_outcome", "string", "complete | error_event | cut | ttft_timeout | timeout | cancelled | '' (one-shot)"),
    ("token_event_us", "binary", "each token event's read instant after the first's, µs (int32 little-endian)"),
    ("token_event_counts", "binary", "tokens each event carried (uint16 little-endian)"),
    # added with sessions and prefix caching (older runs read with STREAM_DEFAULTS)
    ("cached_tokens", "int32", "prompt tokens the server's prefix cache held (usage.prompt_tokens_details."
                               "cached_tokens; -1: not reported)"),
    ("ideal_cached_tokens", "int32", "prompt tokens an unbounded prefix cache would hold from what was sent before "
                                     "(whole blocks; tailrace's count of the prompts it built; -1: not known)"),
    ("prompt_tokens_sent", "int32", "the prompt's length as tailrace built it (the tokenizer's tokens, else words; "
                                    "-1: not known)"),
    ("reasoning_tokens", "int32", "output tokens that were reasoning (reasoning_content deltas; -1: none seen)"),
    ("ttfa_ns", "int64", "first answer token (content or tool call, not reasoning) - t_intended (-1: none)"),
    ("session_id", "int64", "the session this request is a turn of (-1: not a session)"),
    ("turn", "int32", "its turn in the session, 1.. (0: not a session)"),
    ("session_end", "string", "on a session's last request, why it ended: done | error | context_limit | "
                              "run_end ('' otherwise)"),
    # added with pipelines: a pipeline's stages are recorded as a session's turns (session_id: the pipeline's
    # arrival, turn: the stage, session_end on its last request: done | error | run_end)
    ("pipeline", "string", "the pipeline this request is a stage of ('' : none)"),
    # added with images and audio in chat requests
    ("media_count", "int32", "images, audio clips and videos the request carried (0: none)"),
    ("media_bytes", "int64", "their bytes, before base64 (0: none; a URL passed through counts 0)"),
    # added with structured outputs
    ("schema_valid", "int32", "structured outputs: 1 the reply follows the endpoint's JSON Schema, 0 it does not (not "
                             "JSON, or not valid), -1 not checked (no schema, or no whole reply)"),
    # added with graded items (accuracy under load)
    ("item", "int32", "the graded file's item this request asked (its place among the file's items; -1: none)"),
    ("grade", "string", "a graded request's grade: correct | wrong | unparsable (the model's answers) | truncated "
                        "(not correct, stopped at max_tokens) | cut (timed out, cancelled, stream cut) | error | "
                        "grader_error ('': not graded)"),
)

CLOCK_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("worker", "string", "generator worker"),
    ("region", "string", "generator region"),
    ("server", "string", "NTP server host:port"),
    ("local_ns", "int64", "worker clock (epoch ns) at the sample's midpoint"),
    ("offset_ns", "int64", "reference - worker clock"),
    ("delay_ns", "int64", "round-trip delay of the kept packet"),
    ("packets", "int32", "packets sent for this sample"),
    ("stage", "string", "before | during | after"),
)

# strings with few distinct values: dictionary-encoded in the Parquet chunks (a chunk stores each once) and read
# as categoricals (one code per row, never a Python object per row); the rest of a string column is plain
FEW_VALUED = frozenset({"run_id", "region", "worker", "endpoint", "model", "protocol", "status", "code", "error",
                        "server", "stage", "token_source", "finish_reason", "stream_outcome", "session_end", "pipeline",
                        "grade"})

CANCELLED = "cancelled"  # abandoned by the client as declared (an endpoint's `cancel`): neither ok nor an error
STATUSES = ("ok", "http_error", "grpc_error", "timeout", "connection", "bad_response", "client_error", CANCELLED)
REQUEST_COLUMNS = tuple(name for name, _, _ in REQUEST_FIELDS)
# columns added after the first release: older run directories lack them and get these values
STREAM_DEFAULTS: dict[str, object] = {
    "t_first_token": -1, "t_last_token": -1, "ttft_ns": -1, "output_tokens": -1, "input_tokens": -1,
    "token_source": "", "finish_reason": "", "stream_outcome": "", "token_event_us": b"", "token_event_counts": b"",
    "cached_tokens": -1, "ideal_cached_tokens": -1, "prompt_tokens_sent": -1, "reasoning_tokens": -1, "ttfa_ns": -1,
    "session_id": -1, "turn": 0, "session_end": "", "pipeline": "",
    "media_count": 0, "media_bytes": 0, "schema_valid": -1, "item": -1, "grade": ""}
OPTIONAL_DEFAULTS: dict[str, object] = {"batch_size": 1, "correct_count": None, **STREAM_DEFAULTS}
# what a run without generative endpoints writes: its chunks leave the stream columns out (read with their
# defaults), so one-shot requests never pay for converting them on the worker's event loop
ONE_SHOT_FIELDS = tuple(f for f in REQUEST_FIELDS if f[0] not in STREAM_DEFAULTS)



def _row_type(name: str, fields: tuple[tuple[str, str, str], ...], defaults: dict[str, object] | None = None) -> type:
    """A named tuple of the fields; the trailing fields in `defaults` (added later, by the versioning rule) may be
    left out where a row is made."""
    given = defaults or {}
    trailing: list[object] = []
    for column, _, _ in reversed(fields):
        if column not in given:
            break
        trailing.insert(0, given[column])
    return namedtuple(name, [column for column, _, _ in fields], defaults=trailing or None)


RequestRow = _row_type("RequestRow", REQUEST_FIELDS, STREAM_DEFAULTS)
"""One request's record: every field of REQUEST_FIELDS, by keyword."""

ClockRow = _row_type("ClockRow", CLOCK_FIELDS)
"""One clock sample's record: every field of CLOCK_FIELDS, by keyword."""


def arrow_schema(fields: tuple[tuple[str, str, str], ...]):
    """The Arrow schema of a field list (pyarrow is imported here, on first use, not with the contract)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "bool": pa.bool_(),
             "binary": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind, _ in fields])
