"""The master's door: a connecting worker is held out of Locust's workers until its JOIN is admitted
(harness/control/locust_adaptations.py), so that one that fails authentication — a wrong or missing token, a region
the profile does not have, another release — takes no place and no region's share, and the master keeps waiting for
the workers it needs. Refusals are logged once per address and reason, and counted after that: a flood of wrong
connections costs the master a counter each."""
from __future__ import annotations

import time

from tailrace.contract import master_events, messages
from tailrace.harness.control.admission import Admission, Refusals, address_of
from tailrace.harness.control.locust_adaptations import admit_worker, forget_worker, hold_until_admitted

MAX_JOINED_LOGGED = 64  # connections logged one by one beyond the expected workers (a flood is counted as refusals)


class WorkerGate:
    """Admits or refuses each worker's JOIN for one run's master."""

    def __init__(self, runner, admission: Admission, log: master_events.MasterEventLog, expected: int) -> None:
        self.runner, self.admission, self.log, self.expected = runner, admission, log, expected
        self.refusals = Refusals()
        self.joined_logged = 0
        self.refusals_written = time.monotonic()
        hold_until_admitted(runner, admission.is_admitted)

    def on_connect(self, client_id: str, **_kw) -> None:
        """A Locust worker connected (held until its JOIN): logged, up to a bound beyond the expected workers."""
        if self.joined_logged < self.expected + MAX_JOINED_LOGGED:
            self.joined_logged += 1
            self.log.write(master_events.WORKER_JOINED, client_id=client_id)

    def join(self, msg) -> messages.Join | None:
        """The JOIN in Locust's message `msg`, admitted (Locust now counts the worker and may give it a user), or
        None: refused."""
        sender = msg.node_id
        try:
            join = messages.JOIN.decode(msg.data)
        except (TypeError, ValueError):
            self._refuse(sender, None, "a JOIN this master cannot read (run the same tailrace release on both)")
            return None
        reason = self.admission.refusal(join, sender)
        if reason is not None:
            self._refuse(sender, join, reason)
            return None
        self.admission.admit(join)
        admit_worker(self.runner, join.client_id)
        self.log.write(master_events.WORKER_ADMITTED, client_id=join.client_id, worker=join.worker, region=join.region)
        return join

    def _refuse(self, client_id: str, join: messages.Join | None, reason: str) -> None:
        """REFUSED to the sender, which is forgotten (it never had a place); the first refusal of a reason from an
        address is logged, later ones counted (write_refusals)."""
        address = address_of(client_id)
        _, first = self.refusals.add(address, reason)
        if first:
            self.log.write(master_events.WORKER_REFUSED, client_id=client_id, worker=join.worker if join else None,
                           region=join.region if join else None, reason=reason, address=address)
        self.runner.send_message(messages.REFUSED.name, messages.wire(messages.Refused(reason)), client_id=client_id)
        forget_worker(self.runner, client_id)

    def write_refusals(self, every_s: float = 0.0) -> None:
        """The refusals counted since they were last written, one line per address and reason (only when
        `every_s` has passed since the last time)."""
        if time.monotonic() - self.refusals_written < every_s:
            return
        self.refusals_written = time.monotonic()
        for (address, reason), count in self.refusals.unlogged():
            try:
                self.log.write(master_events.WORKER_REFUSALS, address=address, reason=reason, count=count)
            except OSError:
                return
