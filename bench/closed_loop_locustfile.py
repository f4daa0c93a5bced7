"""Locust's own closed-loop maximum: FastHttpUser posting the same KServe v2 request back to back."""
import os

from locust import FastHttpUser, task

BODY = open(os.environ["TAILRACE_BENCH_BODY"], "rb").read()


class ClosedLoop(FastHttpUser):
    @task
    def infer(self):
        self.client.post("/v2/models/digits_mlp_fp32/infer", data=BODY, headers={"Content-Type": "application/json"})
