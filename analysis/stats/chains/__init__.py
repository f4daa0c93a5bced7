"""Statistics of requests that follow requests: sessions (turns, conversations, the prefix cache) and pipelines
(stages, the chain end to end)."""
