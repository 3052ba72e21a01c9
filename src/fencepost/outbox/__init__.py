"""Durable commands with fenced leases: producer API, command context, heartbeat and the worker loop."""

from fencepost.outbox.context import CommandContext, StopRequested
from fencepost.outbox.handlers import BudgetAware, DeliveryBudget, FunctionHandler, Handler, HandlerRegistry
from fencepost.outbox.history import lease_history
from fencepost.outbox.worker import Worker, WorkerConfig

__all__ = ["BudgetAware", "CommandContext", "DeliveryBudget", "FunctionHandler", "Handler", "HandlerRegistry",
           "StopRequested", "Worker", "WorkerConfig", "lease_history"]
