"""Durable commands with fenced leases: producer API, command context, heartbeat and the worker loop."""

from fencepost.outbox.context import CommandContext, StopRequested
from fencepost.outbox.handlers import FunctionHandler, Handler, HandlerRegistry
from fencepost.outbox.worker import Worker, WorkerConfig

__all__ = ["CommandContext", "FunctionHandler", "Handler", "HandlerRegistry", "StopRequested", "Worker",
           "WorkerConfig"]
