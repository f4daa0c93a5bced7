"""kserve-grpc-stream: GRPCInferenceService/ModelStreamInfer on a decoupled model (Triton's streaming gRPC, the way
TensorRT-LLM and vLLM backends stream), behind the same Sender interface as the HTTP streams.

One request a call: `text_input` (BYTES) and, where the model declares them, `max_tokens` (INT32) and the like as
inputs, else as request parameters; `enable_empty_final_response` is asked, so the stream ends with the response
marked `triton_final_response`. Each response is stamped (monotonic) when gRPC hands it over; the first with text is
the first token; an `error_message` in the stream is a failure with its text; a stream that ends without the final
response was cut. Token counts: the output the profile names (`token_count_output`), else one response = one token.
"""
from __future__ import annotations

import struct
import threading
import time

import gevent

from tailrace.contract.credentials import Credential, CredentialError
from tailrace.contract.plan import EndpointTimeouts
from tailrace.contract.profile import Tls
from tailrace.harness.client.generative import PromptPayloads, stream_into
from tailrace.harness.client.http1 import FirstTokenTimeout, Stalled
from tailrace.harness.client.outcome import Outcome, Send, StreamOutcome, classify_exception
from tailrace.harness.client.streams.openai_stream import CUT, STALLED, TIMEOUT, TTFT_TIMEOUT
from tailrace.harness.client.streams.triton_stream import TritonGenerateStream
from tailrace.harness.client.tls import grpc_channel
from tailrace.harness.client.tokenizer import TokenCounter

FINAL = "triton_final_response"


def stream_request(model: str, prompt: str | list, max_tokens: int, ignore_eos: bool, min_tokens: int | None,
                   model_inputs: tuple[str, ...]):
    """The ModelInferRequest of one prompt (chat messages: their contents, one after another)."""
    from tritonclient.grpc import service_pb2

    text = "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else prompt
    request = service_pb2.ModelInferRequest(model_name=model)
    encoded = text.encode()
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", len(encoded)) + encoded)
    asked = {"max_tokens": max_tokens, "ignore_eos": ignore_eos or None,
             "min_tokens": min(min_tokens, max_tokens) if min_tokens else None}
    for name, value in asked.items():
        if value is None:
            continue
        if name in model_inputs and not isinstance(value, bool):
            request.inputs.add(name=name, datatype="INT32", shape=[1])
            request.raw_input_contents.append(struct.pack("<i", value))
        elif isinstance(value, bool):
            request.parameters[name].bool_param = value
        else:
            request.parameters[name].int64_param = value
    request.parameters["triton_enable_empty_final_response"].bool_param = True  # as tritonclient asks it
    return request


def _output(response, name: str):
    """An output's first element (BYTES → str, INT32 / INT64 → int), or None."""
    for i, tensor in enumerate(response.outputs):
        if tensor.name != name:
            continue
        if i < len(response.raw_output_contents):
            raw = response.raw_output_contents[i]
            if tensor.datatype == "BYTES":
                return raw[4:4 + struct.unpack_from("<I", raw)[0]].decode("utf-8", "replace") if len(raw) >= 4 else ""
            if tensor.datatype in ("INT32", "INT64") and raw:
                return struct.unpack_from("<i" if tensor.datatype == "INT32" else "<q", raw)[0]
            return None
        contents = tensor.contents
        if tensor.datatype == "BYTES" and contents.bytes_contents:
            return contents.bytes_contents[0].decode("utf-8", "replace")
        values = contents.int_contents or contents.int64_contents
        return values[0] if values else None
    return None


class GrpcStreamSender:
    """One endpoint's ModelStreamInfer requests over one channel, each encoded before the run."""

    def __init__(self, url: str, model: str, requests: list, timeouts: EndpointTimeouts,
                 credential: Credential | None, tls: Tls | None = None, count_output: str | None = None,
                 counter: TokenCounter | None = None) -> None:
        from tritonclient.grpc import service_pb2_grpc

        self.channel = grpc_channel(url, tls, [("grpc.max_receive_message_length", 64 << 20),
                                               ("grpc.initial_reconnect_backoff_ms", 100),
                                               ("grpc.max_reconnect_backoff_ms", 500)])
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.requests = requests
        self.payloads = PromptPayloads([b""] * len(requests))  # the request path's view: one request a prompt
        self.timeouts = timeouts
        self.credential, self.count_output, self.counter = credential, count_output, counter

    def send(self, call: Send) -> Outcome:
        """Stream prompt `sample` (modulo the prompts); never raises (a failure is an Outcome with a status class,
        and its stream says how far it got)."""
        headers, on_sent = call.headers, call.on_sent
        index = self.payloads.index(call.sample)
        request = self.requests[index]
        result, stream = StreamOutcome(), TritonGenerateStream(self.count_output)
        metadata = [(k.lower(), v) for k, v in headers.items()]
        try:
            if self.credential is not None:
                metadata.append((self.credential.header.lower(), self.credential.value()))
        except CredentialError as exc:
            return Outcome(status="client_error", code="credential", error=str(exc)[:200], stream=result)
        status, code, error, final, bytes_in = "ok", "OK", "", False, 0
        first_s, stall_s = self.timeouts.first_token_s, self.timeouts.stall_s
        first = gevent.Timeout(first_s, FirstTokenTimeout("no first token in time")) if first_s else None
        stall: gevent.Timeout | None = None  # once the stream has begun: the longest silence it may keep
        on_sent()
        ended = threading.Event()

        def outgoing():
            """The one request, then the stream kept open until the final response (a stream the client closes at
            once loses the server's empty final response)."""
            yield request
            ended.wait(self.timeouts.total_s)

        stream_call = self.stub.ModelStreamInfer(outgoing(), metadata=metadata, timeout=self.timeouts.total_s)
        if first is not None:
            first.start()
        try:
            for message in stream_call:
                read_ns = time.perf_counter_ns()
                if stall_s:
                    if stall is not None:
                        stall.close()
                    stall = gevent.Timeout(stall_s, Stalled(f"no event for {stall_s:g} s"))
                    stall.start()
                bytes_in += message.ByteSize()
                if message.error_message:
                    stream.add(read_ns, "", None, "", message.error_message)
                    break
                response = message.infer_response
                text = _output(response, "text_output") or ""
                reported = _output(response, self.count_output) if self.count_output else None
                reason = _output(response, "finish_reason")
                if not reason and "finish_reason" in response.parameters:  # the embedded server says it as one
                    reason = response.parameters["finish_reason"].string_param
                stream.add(read_ns, text, reported, reason if isinstance(reason, str) else "")
                if first is not None and stream.first_token_ns >= 0:
                    first.cancel()
                if FINAL in response.parameters and response.parameters[FINAL].bool_param:
                    final = True
                    break
        except FirstTokenTimeout:
            status, code, error, result.outcome = "timeout", "ttft_timeout", \
                f"no first token within {first_s:g} s", TTFT_TIMEOUT
        except Stalled as exc:
            status, code, error, result.outcome = "timeout", STALLED, str(exc), STALLED
        except Exception as exc:  # noqa: BLE001 - every failure is classified and recorded
            status, code, error = classify_exception(exc)
            result.outcome = TIMEOUT if status == "timeout" else CUT if stream.event_ns else ""
        finally:
            if first is not None:
                first.cancel()
            if stall is not None:
                stall.close()
            ended.set()
            stream_call.cancel()
        stream_into(result, stream, self.counter, index)
        if status == "ok":
            if stream.error:
                status, code, error, result.outcome = "bad_response", "error_event", stream.error, "error_event"
            elif not final:
                status, code, error, result.outcome = "bad_response", CUT, "the stream ended before the final " \
                                                                          "response", CUT
            else:
                result.outcome = "complete"
        return Outcome(status=status, code=code, error=error, bytes_out=request.ByteSize(), bytes_in=bytes_in,
                       stream=result)

    def warm_up(self) -> None:
        import grpc

        if self.credential is not None:
            self.credential.value()
        grpc.channel_ready_future(self.channel).result(timeout=10)

    def close(self) -> None:
        self.channel.close()
