"""The add worker (`add-worker-0`, numAddWorkerThreads > 0): a connection's socket reads are split, and their
plain adds taken by the Bookie's add run (bkfast.net.add_runs, bkfast.bookie.fast_adds), on this thread
instead of the reactor. The reactor reads the socket, hands the bytes over, and handles what comes back: the
frames the run did not take (the general path, in order) and the count of the adds it took. Their answers
come from their journals' completions, as on the reactor.

Owns: the queue of socket reads handed over, the thread that runs them (their hand-backs are batched by
bkfast.net.hand_back: one callFromThread for whatever has finished when the reactor gets to it), and the
adds taken but not yet counted on the reactor (they still count against maxPendingAddRequestsPerThread).

Why one thread: a run holds the Bookie's ledger lock and each directory's write-cache half from its first
add to its end, so the runs of two workers would take turns. What the worker buys is that the reactor
reads and answers other sockets, and serves reads, while a run takes its adds (with the GIL released).

Order: a connection has at most one socket read at the worker; what the reactor reads from it meanwhile
waits on the connection (`worker_backlog`) and is handed over, or handled, when that read is back. A run's
journal shares are queued by the worker before its read goes back, so a general-path batch the reactor
makes of the rest of that read is journaled after them. The table of admitted ledgers changes only under
the ledger lock the run holds (fences, deletes, LAC watches), so a fence that comes while a run is open on
the worker waits for the run's end, and refuses every add after it.

Must never: touch a connection's transport, output or counters on the worker (only the splitter of a
connection whose read it holds), or let a taken add be answered before it is counted (the first of the
hand-back and the add's answer counts the run).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bkfast.codec import OP_ADD
from bkfast.errors import FrameError
from bkfast.net import add_runs
from bkfast.net._handoff import HandOff
from bkfast.net.hand_back import HandBack
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.stats import now_ns
from bkfast.threads import ADD_WORKER, NamedThread

if TYPE_CHECKING:
    from bkfast.bookie.interface import AddRuns

log = logging.getLogger(__name__)

# Where a frame (length prefix included) says it is an add: v2, the opcode byte of its header int; v3, the
# operation of its BKPacketHeader (Request field 1 `0A len`, then `08 version`, then `10 operation`).
V2_OPCODE_AT = 5
V3_OPERATION_TAG = 0x10
V3_OPERATION_AT = 9

# The bytes a connection's reads may pile up behind its read at the worker before the reactor stops reading
# the socket (resumed when that read is back).
WORKER_BACKLOG_BYTES = 1 << 20

__all__ = ["AddWorker", "hand_over"]


class HandedRead:
    """One socket read at the worker, and what became of it."""

    __slots__ = ("worker", "conn", "pieces", "v3", "arrival", "start", "frames", "error", "count", "refused",
                 "lacs", "counted")

    def __init__(self, worker: AddWorker, conn, pieces: list[bytes], arrival: int):
        self.worker = worker                    # its answers may come after the server let the worker go
        self.conn = conn
        # The socket read, or the reads that waited behind the last one: split in turn, never joined (a
        # join of a backlog copied it with the GIL held, the largest line of the hand-back).
        self.pieces: list[bytes] | None = pieces
        self.v3 = not conn.v2
        self.arrival = arrival
        self.start = arrival
        self.frames: list = []
        self.error: FrameError | None = None
        self.count = 0                          # adds the run took
        self.refused: list = []                 # shares a journal refused: (error, taken, count)
        self.lacs: list = []                    # (ledger, LAC) of watched ledgers, advanced on the reactor
        self.counted = False

    def answer(self, error, taken: bytes, n: int) -> None:
        """A journal share of the run is durable (or failed): on the reactor."""
        self.count_taken()
        add_runs.answer(self.conn, self.v3, error, taken, n, self.arrival, self.start)

    def count_taken(self) -> None:
        """The run's adds counted as in flight on the connection (once, on the reactor)."""
        if self.counted:
            return
        self.counted = True
        if self.count:
            conn = self.conn
            add_runs.count_taken(conn, self.v3, self.count, self.arrival, self.start)
            self.worker.counted += self.count


class AddWorker:
    """hand(read): the worker splits it and takes its adds; the reactor gets it back (see the module)."""

    def __init__(self, reactor, runs: AddRuns, after_delivery, index: int = 0):
        self._runs = runs
        # HandOff wakes the worker with the GIL released (bkfast.net._handoff says why).
        self._jobs: HandOff[HandedRead | None] = HandOff()
        self._hand_back = HandBack(reactor, lambda read: handed_back(read, runs), after_delivery,
                                   "a read back from the add worker")
        # Adds the worker's runs took (written by the worker) and those counted on the reactor (written by
        # the reactor): the difference is in flight but not in the factory's pending_adds yet.
        self.taken = 0
        self.counted = 0
        self._thread = NamedThread(self._work, f"{ADD_WORKER}-{index}")
        self._thread.start()

    def hand(self, read: HandedRead) -> None:
        self._jobs.put(read)

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)

    # --- the worker thread ----------------------------------------------------------------------------
    def _work(self) -> None:
        next_read = self._jobs.get
        while True:
            read = next_read()
            if read is None:
                return
            try:
                self._take(read)
            except FrameError as error:
                read.error = error
            except BaseException as error:  # a bug: the connection is closed, the worker goes on
                log.exception("the add worker failed on a read from %s", read.conn.peer)
                read.error = FrameError(f"internal error: {error!r}")
                read.error.frames = []
            self._hand_back.post(read)

    def _take(self, read: HandedRead) -> None:
        conn = read.conn
        pieces, read.pieces = read.pieces, None
        assert pieces is not None
        factory = conn.factory
        limit = factory.max_pending_adds
        room = (limit - factory.pending_adds - (self.taken - self.counted) if limit > 0
                else add_runs.UNBOUNDED_RUN_ADDS)
        runs = self._runs
        run = runs.open(room)
        if run is None:
            read.frames = split(conn.splitter, pieces, None, read.v3)
            return
        read.start = now_ns()
        try:
            read.frames = split(conn.splitter, pieces, run, read.v3)
        finally:
            read.count, read.refused = runs.close(run, read.answer, lacs_to=read.lacs)
            self.taken += read.count


def split(splitter, pieces: list[bytes], run, v3: bool) -> list:
    """The frames of `pieces` (consecutive socket reads) the run left, as one read's split would leave them:
    once a frame falls through to the general path, every later frame follows it, in order."""
    frames: list = []
    try:
        for piece in pieces:
            if run is None or frames:
                frames.extend(splitter.feed(piece))
            else:
                frames = splitter.feed(piece, run, v3)
    except FrameError as error:
        error.frames = frames + error.frames
        raise
    return frames


def hand_over(conn, pieces: list[bytes]) -> bool:
    """On the reactor: give socket reads of `conn` (one, or those that waited behind its last read at the
    worker) to the add worker, or queue them behind the connection's read already there. False: the
    reactor handles them (no worker, the connection may not run adds now, or the first is not one of adds)."""
    backlog = conn.worker_backlog
    if backlog is not None:
        backlog.extend(pieces)
        conn.worker_backlog_bytes += sum(map(len, pieces))
        if conn.worker_backlog_bytes > WORKER_BACKLOG_BYTES and conn.connected:
            # The worker is slow (a journal queue full, a fence's wait): stop reading this socket.
            conn.worker_paused_reading = True
            conn.transport.pauseProducing()
        return True
    worker = conn.factory.add_worker
    if worker is None or not add_runs.may_run(conn) or not carries_adds(conn, pieces[0]):
        return False
    conn.worker_backlog, conn.worker_backlog_bytes = [], 0
    worker.hand(HandedRead(worker, conn, pieces, conn.arrival_ns))
    return True


def carries_adds(conn, data: bytes) -> bool:
    """Whether a socket read is one of adds: the first frame it completes or begins (the splitter may hold
    the start of it) is an ADD (v2) or ADD_ENTRY (v3, its header serialized in field order, as every
    protobuf library writes it). A read of reads stays on the reactor: the hop to the worker and back would
    cost it more than the split it saves."""
    head = conn.splitter.pending_head(V3_OPERATION_AT + 1)
    if head:
        head += data[:V3_OPERATION_AT + 1]
    else:
        head = data
    if conn.v2:
        return len(head) > V2_OPCODE_AT and head[V2_OPCODE_AT] == OP_ADD
    return (len(head) > V3_OPERATION_AT and head[V3_OPERATION_AT - 1] == V3_OPERATION_TAG
            and head[V3_OPERATION_AT] == pb.ADD_ENTRY)


def handed_back(read: HandedRead, runs: AddRuns) -> None:
    """On the reactor: a read is back from the worker; its frames go on as the reactor's own split would."""
    conn = read.conn
    backlog, conn.worker_backlog = conn.worker_backlog, None
    if conn.worker_paused_reading:
        conn.worker_paused_reading = False
        if conn.connected and not conn.reading_paused:
            conn.transport.resumeProducing()
    read.count_taken()
    for error, taken, n in read.refused:
        read.answer(error, taken, n)
    if read.lacs:
        runs.advance_lacs(read.lacs)
    if not conn.connected:
        return
    conn.arrival_ns = read.arrival
    conn.frames_split(read.frames if read.error is None else read.error.frames, read.error)
    if backlog and conn.connected:
        conn.pieces_received(backlog)
