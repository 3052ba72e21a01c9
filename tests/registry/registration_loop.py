"""A stand-in worker process for the registry tests: it registers, beats and deregisters exactly as a worker
does (``fencepost.outbox.registry.WorkerRegistration``), without claiming anything.

Usage: ``python registration_loop.py DATABASE_URL WORKER_ID HEARTBEAT_SECONDS IN_FLIGHT KIND [KIND ...]``

It registers (``start``), logs ``{"event": "registration_loop_started"}``, then beats every
HEARTBEAT_SECONDS with IN_FLIGHT commands in flight until SIGTERM, when it deregisters (``stop``) and exits 0.
The JSON log goes to stderr, as ``fencepost worker``'s does; ``FENCEPOST_CRASHPOINT`` can SIGKILL it at any
commit of ``workers.register``, ``workers.beat`` or ``workers.deregister``.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from fencepost.cli import logs
from fencepost.outbox.registry import WorkerRegistration
from fencepost.store import open_store

log = logging.getLogger("fencepost.registration_loop")


def main(argv: list[str]) -> int:
    url, worker_id, heartbeat, in_flight, *kinds = argv
    logs.configure("json")
    store = open_store(url, create=False)
    store.require_schema()
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    registration = WorkerRegistration(store, worker_id, kinds, heartbeat_seconds=float(heartbeat))
    try:
        registration.start()
        log.info("registration loop started", extra={"event": "registration_loop_started", "worker": worker_id})
        while not stop.wait(float(heartbeat)):
            registration.beat(int(in_flight))
        registration.stop()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
