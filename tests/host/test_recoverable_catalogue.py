"""host-spec M1, M2: every source of ``RecoverableFinalization`` this slice has, one case each, on every backend.
Each raises it and leaves the invocation not ``failed`` (no other execution wrote a verdict in these cases)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fencepost.core.errors import RecoverableFinalization
from fencepost.core.statuses import InvocationStatus
from fencepost.host import Ambiguous, Inline
from fencepost.host.adapter import AdapterCall
from fencepost.store.faults import FaultInjectingStore
from helpers.store_backends import StoreBackend
from host.kit import PARAMS, Ledger, Scripted, Spy, charge_action, make_host
from host.test_degraded_settlement import fence_out


def _take_over(backend: StoreBackend, faulty: FaultInjectingStore) -> Callable[[AdapterCall], None]:
    def steal(call: AdapterCall) -> None:
        fence_out(faulty.inner)
    return steal


#: case -> (fault plan, the adapter's script, steps, steal the lease during the call, verdict durable afterwards)
CASES: dict[str, tuple[dict[str, set[int]], tuple[Any, ...], tuple[str, ...], bool, bool]] = {
    "after-adapters finalization (J4, L27)": ({"finish_command": {1}}, (), ("charge",), False, False),
    "store error after a durable effect (G15)": ({"insert_adapter_invocation": {2}}, (), ("charge", "ship"),
                                                 False, False),
    "refused lease check after a success (C4, C8)": ({}, (), ("charge",), True, False),
    "lease loss in atomic settlement (K4)": ({}, (Ambiguous("reset"),), ("charge",), True, False),
    "evidence failure after a durable verdict (K7)": ({"update_adapter_invocation": {1, 2, 3}},
                                                      (Ambiguous("reset"),), ("charge",), False, True),
    "unwritable verdict (K9)": ({"update_leased_invocation": {1, 2, 3, 4}}, (Ambiguous("reset"),), ("charge",),
                                False, False),
    "failed step-row read before the shortcut (G, L75)": ({"list_adapter_invocations": {1}}, (), ("charge",),
                                                          False, False),
    "post-success marker and verdict unsavable (L3)": ({"update_adapter_invocation": {1, 2, 3, 4},
                                                        "update_leased_invocation": {1, 2}}, (), ("charge",),
                                                       False, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_recoverable_finalization_catalogue(backend: StoreBackend, ledger: Ledger, case: str) -> None:
    plan, script, steps, steal, durable = CASES[case]
    faulty = FaultInjectingStore(backend.migrated(), plan=plan)
    adapter = Scripted(ledger, *script, before=_take_over(backend, faulty) if steal else None)
    host = make_host(faulty, charge_action(Spy(), steps=steps), adapter, lease=backend.short_lease)
    with pytest.raises(RecoverableFinalization) as raised:
        host.submit("shop.charge", PARAMS, actor="u1", idempotency_key="k", mode=Inline())
    assert raised.value.verdict_durable is durable
    stored = faulty.inner.read(lambda tx: tx.host.list_invocations())
    assert len(stored) == 1 and stored[0].status is not InvocationStatus.FAILED  # M1
    assert (stored[0].status is InvocationStatus.RECONCILIATION_REQUIRED) is durable
