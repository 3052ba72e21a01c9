"""The CLI's one error table (ADR 0016): error class -> process exit code, documented in docs/configuration.md.

Exit codes are a command-line concern, so they live here and not on the error classes in ``fencepost.core``.
"""

from __future__ import annotations

from fencepost.core.errors import (
    Conflict,
    FencepostError,
    IdempotencyConflict,
    IntegrityViolation,
    InvalidInput,
    NotAllowed,
    NotFound,
    RecoverableFinalization,
    RedactionFailed,
    SchemaNotReady,
    StoreUnavailable,
)

# ``exit_code`` walks the class's MRO, so a subclass (``InvalidPlan``, ``LeaseActive``, ``StoreBusy``) exits with
# its parent's code unless it has a row of its own. ``LeaseLost`` has none: it exits 1 like any other error.
EXIT_CODES: dict[type[FencepostError], int] = {
    FencepostError: 1,
    InvalidInput: 2,
    NotFound: 2,
    Conflict: 3,
    SchemaNotReady: 4,
    StoreUnavailable: 5,
    IntegrityViolation: 5,  # a corrupt record is reported like a store that cannot be trusted
    NotAllowed: 6,
    IdempotencyConflict: 3,  # a conflict, named for what differs (ADR 0023)
    RedactionFailed: 2,  # the application's redaction hook refused the value; nothing was stored (ADR 0042)
    RecoverableFinalization: 5,  # not recorded yet, like a store that failed: retry later
}


def exit_code(error_type: type[FencepostError]) -> int:
    """The exit code for ``error_type`` (1-6): its own row of ``EXIT_CODES``, else its nearest ancestor's.

    Every ``FencepostError`` subclass has one, since ``FencepostError`` itself has a row (1).
    """
    for cls in error_type.__mro__:
        if issubclass(cls, FencepostError) and cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return EXIT_CODES[FencepostError]  # unreachable: the walk ends at FencepostError, which has a row


#: ``workflow run`` and ``workflow status --watch`` exit by the Run's verdict (ADR 0072's statuses): 0 and 1 as
#: any command's success and failure, and codes of their own, above the error table's 1-6, for the two verdicts
#: that are neither, so a script can tell a deadline from an operator's cancel without parsing output.
RUN_VERDICT_EXIT: dict[str, int] = {"succeeded": 0, "failed": 1, "timed_out": 7, "cancelled": 8}
#: Still ``running`` when ``--timeout`` ran out (the Run goes on; nothing was cancelled).
FOLLOW_TIMEOUT_EXIT = 9
#: Interrupted (SIGINT) while following: the shell's 128 + 2. The Run goes on.
INTERRUPTED_EXIT = 130
