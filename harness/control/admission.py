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

    def refusal(self, join: messages.Join, sender: str | None = None) -> str | None:
        """Why `join` may not take part, or None. `sender`: the Locust client id the JOIN came from (a JOIN
        naming another one is refused)."""
        if sender is not None and join.client_id != sender:
            return "its JOIN names another worker's client id"
        if join.protocol != messages.PROTOCOL_VERSION:
            release = f" (tailrace {join.version})" if join.version else ""
            return (f"incompatible version: the worker{release} speaks control protocol {join.protocol}, the master "
                    f"{messages.PROTOCOL_VERSION} (run the same tailrace release on both)")
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

    def is_admitted(self, client_id: str) -> bool:
        return client_id in self.admitted


def address_of(client_id: str) -> str:
    """The host a Locust worker runs on, as its client id says (Locust: '<hostname>_<32 hex>')."""
    host, _, suffix = client_id.rpartition("_")
    return host if host and len(suffix) == 32 else client_id[:64]


class Refusals:
    """The refusals so far, counted per (address, reason): the first of each is logged at once, later ones as a
    count (at most every REFUSALS_EVERY_S, and at the run's end), so a flood of wrong connections costs the master
    a counter each. Bounded: past MAX_KEYS distinct addresses and reasons, the rest are counted under one key."""

    MAX_KEYS = 256
    OTHERS = ("(other addresses)", "(other reasons)")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.logged: dict[tuple[str, str], int] = {}  # the count last written

    def add(self, address: str, reason: str) -> tuple[tuple[str, str], bool]:
        """Count one refusal; (its key, whether it is the first of its key)."""
        key = (address, reason)
        if key not in self.counts and len(self.counts) >= self.MAX_KEYS:
            key = self.OTHERS
        self.counts[key] = self.counts.get(key, 0) + 1
        first = self.counts[key] == 1
        if first:
            self.logged[key] = 1
        return key, first

    def unlogged(self) -> list[tuple[tuple[str, str], int]]:
        """The keys whose count grew since it was last written, with their counts (marked written)."""
        out = [(key, n) for key, n in self.counts.items() if self.logged.get(key) != n]
        for key, n in out:
            self.logged[key] = n
        return out
