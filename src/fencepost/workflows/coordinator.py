"""The workflow coordinator: a worker sweep that advances Runs in bounded, caller-driven pages (ADR 0072).

No thread or timer per Run. Each run of the sweep reads up to three candidate pages of at most ``PAGE`` Runs
that can actually advance (cancellation, then task verdicts, then steps to start: the ADR-0229 order) and
advances each listed Run once (``fencepost.workflows.progress.advance``, one transaction per Run). A step's task
verdict is itself what lists its Run on the next page: the durable state is the queue, so nothing that must be
remembered can be lost between a verdict and the advance it calls for. Every worker may run the sweep at once:
the advance of one Run is serialized by its lock and its compare-and-set writes, and a Run advanced by another
worker in between answers ``unchanged``.

Pages go round-robin by Run id (a cursor per page), so Runs listed again and again cannot starve the others.
"""

from __future__ import annotations

import logging
import time
from functools import partial

from fencepost.core.errors import Conflict, IntegrityViolation, NotFound
from fencepost.host import Host
from fencepost.outbox.worker import Sweep
from fencepost.store.base import Store
from fencepost.store.ports import UnitOfWork
from fencepost.workflows.progress import advance

#: Runs per candidate page (ADR-0226: at most 64).
PAGE = 64
#: Seconds a Run whose rows contradict each other is left alone before this worker tries it again.
REFUSED_RETRY_SECONDS = 60.0
#: The candidate pages, in the order one sweep reads them.
PAGES = ("cancelling", "verdicts", "ready")

log = logging.getLogger("fencepost.workflow")


def _page(tx: UnitOfWork, *, page: str, after: str) -> list[str]:
    return tx.progress.candidates(page, after=after, limit=PAGE)


class Coordinator:
    """The coordinator of one worker process (its cursors); ``run`` is the sweep body.

    Args:
        store: the control store. host: the workflow host (``workflow_host``) that submits step tasks.
    """

    def __init__(self, store: Store, host: Host) -> None:
        self.store = store
        self.host = host
        self._after = dict.fromkeys(PAGES, "")
        self._refused: dict[str, float] = {}  # run id -> monotonic instant until which it is not tried again

    def run(self, store: Store, budget_seconds: float) -> int:
        """One sweep: returns how many Runs changed. Stops taking new Runs once ``budget_seconds`` passed."""
        deadline = time.monotonic() + budget_seconds
        changed = 0
        for page in PAGES:
            after = self._after[page]
            ids = store.read(partial(_page, page=page, after=after))
            self._after[page] = ids[-1] if len(ids) == PAGE else ""
            for run_id in ids:
                if self._refused.get(run_id, 0.0) > time.monotonic():
                    continue
                if time.monotonic() >= deadline:
                    self._after[page] = run_id if run_id > after else ""
                    return changed
                try:
                    if advance(store, self.host, run_id).changed:
                        changed += 1
                except (Conflict, NotFound) as error:  # another worker's round won: the next sweep sees it
                    log.info("advance skipped", extra={"event": "workflow_advance_skipped", "run_id": run_id,
                                                       "error": str(error)})
                except IntegrityViolation as error:  # one corrupt Run must not stop the others; audit names it
                    self._refused[run_id] = time.monotonic() + REFUSED_RETRY_SECONDS
                    log.error("advance refused", extra={"event": "workflow_advance_refused", "run_id": run_id,
                                                        "error": str(error),
                                                        "retry_seconds": REFUSED_RETRY_SECONDS})
        return changed

    def sweep(self) -> Sweep:
        """The worker sweep (``fencepost.outbox.worker.Sweep``): at most every 50 ms, about a second at a time."""
        return Sweep(name="workflow.coordinator", run=self.run, interval_seconds=0.05, budget_seconds=1.0)
