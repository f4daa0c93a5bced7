"""Who may take part in a run: a worker proves the run's token (an HMAC of its Locust client id under the token,
so the token itself never travels on Locust's unauthenticated channel) for a region and index of the profile,
and no second worker takes a name already taken."""
from __future__ import annotations

import hashlib
import hmac

from tailrace.contract import messages
from tailrace.contract.plan import RunPlan


def token_proof(token: str, client_id: str) -> str:
    """What a worker sends for the token."""
    return hmac.new(token.encode(), client_id.encode(), hashlib.sha256).hexdigest()


class Admission:
    """The master's record of admitted workers (client id → JOIN)."""

    def __init__(self, plan: RunPlan, token: str) -> None:
        self.token = token
        self.slots = {r.name: r.workers for r in plan.profile.regions}
        self.admitted: dict[str, messages.Join] = {}

    def refusal(self, join: messages.Join) -> str | None:
        """Why `join` may not take part, or None."""
        if not self.token or not hmac.compare_digest(join.proof, token_proof(self.token, join.client_id)):
            return "wrong run token (set TAILRACE_RUN_TOKEN or --token-file to the master's)"
        if join.region not in self.slots:
            return f"region {join.region!r} is not in the profile (regions: {', '.join(self.slots)})"
        if not 0 <= join.index < self.slots[join.region]:
            return (f"region {join.region} has {self.slots[join.region]} worker(s); index {join.index} is not one of "
                    f"them")
        if any(j.worker == join.worker and cid != join.client_id for cid, j in self.admitted.items()):
            return f"a worker {join.worker} has already joined"
        return None

    def admit(self, join: messages.Join) -> None:
        self.admitted[join.client_id] = join
