"""bkfast.http.limits.AdmissionGate on the real reactor and its thread pool: how many admin handlers run at
once, how many wait, who goes first, and the busy share that spaces them out."""

from __future__ import annotations

import threading
import time

import pytest

from bkfast.errors import AdminBusyError
from bkfast.http.limits import AdmissionGate, load_json
from tests.reactor_thread import call, reactor


def _gate(**kw) -> AdmissionGate:
    kw.setdefault("burst_s", 10.0)
    kw.setdefault("per_request_s", 0.0)
    return AdmissionGate(reactor, **kw)


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_bounded_concurrency_and_queue_then_refusal():
    gate = _gate(concurrency=1, max_queued=1, busy_share=1.0)
    release = threading.Event()
    order, results = [], []

    def blocker():
        order.append("blocker")
        release.wait(10)
        return "b"

    def second():
        order.append("second")
        return "s"

    call(lambda: gate.run(blocker).addCallback(results.append) and None)
    _wait(lambda: order == ["blocker"])
    call(lambda: gate.run(second).addCallback(results.append) and None)
    with pytest.raises(AdminBusyError):
        call(gate.run, second)
    assert gate.refused == 1 and order == ["blocker"]
    release.set()
    _wait(lambda: len(results) == 2)
    assert results == ["b", "s"] and order == ["blocker", "second"]


def test_requests_with_credentials_go_ahead_of_anonymous_ones():
    gate = _gate(concurrency=1, max_queued=10, busy_share=1.0)
    release = threading.Event()
    order = []

    def job(name):
        order.append(name)
        if name == "blocker":
            release.wait(10)

    call(lambda: gate.run(job, "blocker") and None)
    _wait(lambda: order == ["blocker"])
    for name, ahead in [("anon-1", False), ("anon-2", False), ("operator-1", True), ("operator-2", True)]:
        call(lambda n=name, a=ahead: gate.run(job, n, ahead=a) and None)
    release.set()
    _wait(lambda: len(order) == 5)
    assert order == ["blocker", "operator-1", "operator-2", "anon-1", "anon-2"]


def test_busy_share_spaces_handlers_out():
    """busy_share 0.1: a handler busy for 0.1 s owes 0.9 s before the next one may start."""
    gate = _gate(concurrency=1, max_queued=10, busy_share=0.1, burst_s=0.0)
    starts = []

    def job():
        starts.append(time.monotonic())
        time.sleep(0.1)

    call(lambda: [gate.run(job) for _ in range(3)] and None)
    _wait(lambda: len(starts) == 3, timeout=20)
    assert starts[1] - starts[0] >= 0.9
    assert starts[2] - starts[1] >= 0.9
    assert gate.busy_s >= 0.2           # the first two are charged; the third is still running


def test_a_request_whose_client_left_is_not_run():
    gate = _gate(concurrency=1, max_queued=10, busy_share=1.0)
    release = threading.Event()
    ran = []

    call(lambda: gate.run(lambda: (ran.append("blocker"), release.wait(10))) and None)
    _wait(lambda: ran == ["blocker"])
    d = call(lambda: [gate.run(ran.append, "gone")])[0]
    call(d.cancel)
    call(lambda: gate.run(ran.append, "kept") and None)
    release.set()
    _wait(lambda: ran[-1:] == ["kept"])
    assert ran == ["blocker", "kept"]


def test_handler_errors_reach_the_caller():
    gate = _gate(concurrency=1, max_queued=1, busy_share=1.0)

    def boom():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        call(gate.run, boom)


@pytest.mark.parametrize("body", [b"[" * 50_000, b'{"a":' * 50_000, b"\xff\xfe", b"{nope"])
def test_load_json_turns_every_failure_into_value_error(body):
    with pytest.raises(ValueError):
        load_json(body)
