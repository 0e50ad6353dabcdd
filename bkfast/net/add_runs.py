"""The server's side of the add fast path (bkfast.bookie.fast_adds): a socket read's plain adds, v2 ADDs or
v3 ADD_ENTRYs, taken by the Bookie's add run while the frame splitter cuts the read, before any frame is
made of them.

Owns: when a connection's read may go through a run (the server uses the fast path, the connection
holds nothing back, has no security gate, and the run may take what maxPendingAddRequestsPerThread still
allows), the accounting of what it took (in-flight adds, WRITE_THREAD_QUEUED_LATENCY for v2, as the
batch path records them), and the answers, built from the run's packed ids in one call per journal share
once it is durable.

Must never: let a run take an add behind a frame the connection holds (order). With several journals
each ledger's answers still come in entry order: a ledger's records all go to one journal, whose
completions run in queue order, and a general-path batch is answered journal share by journal share
(Bookie.add_entries), so a run's share is never answered ahead of an earlier batch's share on its
journal. Nor leave a run open (it holds the Bookie's locks: closed in a `finally`).
"""

from __future__ import annotations

from bkfast.errors import V2Rc, V3Status, v2_rc_for, v3_status_for
from bkfast.stats import now_ns

# The adds one socket read may hand a run when maxPendingAddRequestsPerThread is off: more than a read holds.
UNBOUNDED_RUN_ADDS = 1 << 20


def may_run(conn) -> bool:
    """Whether a socket read of `conn` may go through an add run now (see the module docstring)."""
    return not (conn.factory.add_runs is None or conn.gate is not None or conn.held or conn.blocked)


def split_taking_adds(conn, data) -> list:
    """The frames of a socket read after the plain adds the Bookie's add run took on the way (stored and
    journaled); their answers go out from their journals' completions. With an add worker, the runs are
    its own: a read the reactor splits takes none."""
    if conn.factory.add_worker is not None or not may_run(conn):
        return conn.splitter.feed(data)
    factory = conn.factory
    runs = factory.add_runs
    limit = factory.max_pending_adds
    run = runs.open(limit - factory.pending_adds if limit > 0 else UNBOUNDED_RUN_ADDS)
    if run is None:
        return conn.splitter.feed(data)
    v3 = not conn.v2
    arrival, start = conn.arrival_ns, now_ns()
    try:
        return conn.splitter.feed(data, run, v3)
    finally:
        count, refused = runs.close(run, lambda error, taken, n: answer(conn, v3, error, taken, n, arrival, start))
        if count:
            count_taken(conn, v3, count, arrival, start)
            for error, taken, n in refused:
                answer(conn, v3, error, taken, n, arrival, start)


def count_taken(conn, v3: bool, count: int, arrival: int, start: int) -> None:
    """A run took `count` adds of a socket read of `conn`: in flight now, as a batch's adds are."""
    factory = conn.factory
    factory.stats.reactor_tasks += count
    if not v3:
        factory.stats.write_queued.ok_ns_many(count, start - arrival)
    conn.adds_started(count)


def answer(conn, v3: bool, error, taken: bytes, n: int, arrival: int, start: int) -> None:
    """n adds of a run (packed ids `taken`) are durable, or failed: answered as a batch's adds are."""
    if not conn.adds_completed(n, error, arrival, start):
        return
    if v3:
        conn.out.add_v3_taken_add_responses(V3Status.EOK if error is None else int(v3_status_for(error)), taken)
    else:
        conn.out.add_taken_add_responses(V2Rc.EOK if error is None else v2_rc_for(error), taken)
    conn.respond()
