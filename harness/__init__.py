"""Load generation: the protocol clients, what a generative endpoint is sent (prompts, traces, sessions), the
open-loop schedule of any arrival process, the Locust worker and master, recording and orchestration."""
