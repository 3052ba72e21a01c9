"""The worker's slot pool (``fencepost.outbox.slots``): never more threads than slots, none started while one is
idle, a failing call does not cost a slot, and shutdown ends every thread once its calls ran."""

from __future__ import annotations

import threading

import pytest

from fencepost.outbox.slots import SlotPool


def test_calls_run_on_at_most_size_threads_at_once() -> None:
    pool = SlotPool(3, "t-slot")
    gate = threading.Event()
    running: list[str] = []
    lock = threading.Lock()
    peak = [0]
    done = threading.Semaphore(0)

    def call(i: int) -> None:
        with lock:
            running.append(threading.current_thread().name)
            peak[0] = max(peak[0], len(running))
        gate.wait(5)
        with lock:
            running.remove(threading.current_thread().name)
        done.release()

    for i in range(7):
        pool.submit(call, i)
    assert len(pool._threads) == 3  # the seven calls share three threads
    gate.set()
    for _ in range(7):
        assert done.acquire(timeout=5)
    assert peak[0] == 3
    pool.shutdown()
    for thread in pool._threads:
        thread.join(5)
        assert not thread.is_alive()


def test_an_idle_thread_takes_the_next_call_instead_of_a_new_thread() -> None:
    pool = SlotPool(10, "t-slot")
    done = threading.Semaphore(0)
    for _ in range(5):
        pool.submit(done.release)
        assert done.acquire(timeout=5)
    assert len(pool._threads) == 1
    pool.shutdown()


def test_a_call_that_raises_is_logged_and_the_slot_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = SlotPool(1, "t-slot")
    done = threading.Event()

    def boom() -> None:
        raise ValueError("bug")

    pool.submit(boom)
    pool.submit(done.set)
    assert done.wait(5)
    assert any(r.getMessage() == "a slot's call failed" for r in caplog.records)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(done.set)


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        SlotPool(0, "t-slot")
