"""What a streamed response says, event by event, for each protocol tailrace reads: server-sent events
(`sse.py`), OpenAI's chat and completions streams (`openai_stream.py`), Anthropic's Messages stream
(`anthropic_stream.py`), OpenAI's Responses stream (`responses_stream.py`) and Triton's generate stream
(`triton_stream.py`) — each a state fed one event at a time, saying the token events' instants and counts, the
usage, how the stream ended."""
