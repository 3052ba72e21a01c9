"""A real worker process whose handler leaves the finish to the worker, for the ``outbox.deliver`` windows.

``outbox.deliver`` is the worker's batched DELIVERED finish of the commands whose handler returned without
finishing them itself. The only built-in handler (rehearsal Attempts) finishes inside ``rehearsal.succeed``,
so no ``fencepost`` command reaches it; this script runs the real ``fencepost.outbox.Worker`` with one such
handler instead (kind ``crash.echo``), as a subprocess that a crash point can SIGKILL.

Usage: ``python echo_worker.py DATABASE_URL WORKER_ID BATCH_SIZE LEASE_SECONDS EXECUTIONS_FILE``

Each execution of the handler appends ``{"command": id, "delivery": n}`` to EXECUTIONS_FILE before the
worker's deliver transaction, so a test sees at-least-once execution beside the exactly-once recorded outcome.
SIGTERM stops the worker gracefully (exit 0); the JSON log goes to stderr as ``fencepost worker``'s does.
"""

from __future__ import annotations

import json
import signal
import sys
from types import FrameType

from fencepost.cli import logs
from fencepost.outbox import CommandContext, FunctionHandler, HandlerRegistry, Worker, WorkerConfig
from fencepost.store import open_store

KIND = "crash.echo"
POLL_SECONDS = 0.05


def main(argv: list[str]) -> int:
    url, worker_id, batch_size, lease_seconds, executions = argv
    logs.configure("json")
    store = open_store(url, create=False)
    store.require_schema()

    def echo(ctx: CommandContext) -> None:
        with open(executions, "a", encoding="utf-8") as out:
            out.write(json.dumps({"command": ctx.command.id, "delivery": ctx.delivery}) + "\n")

    registry = HandlerRegistry()
    registry.register(KIND, FunctionHandler(echo))
    worker = Worker(store, registry, WorkerConfig(poll_interval=POLL_SECONDS, batch_size=int(batch_size),
                                                  concurrency=int(batch_size),
                                                  lease_seconds=float(lease_seconds), worker_id=worker_id))

    def stop(signum: int, frame: FrameType | None) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, stop)
    try:
        worker.run()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
