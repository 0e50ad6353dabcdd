"""The bookie's network server: v2 and v3 BookKeeper protocols on one Twisted port.

Owns: framing (Cython FrameSplitter), telling v3 from v2 per connection (spec §2.1: every connection
starts in v3 mode and falls back to v2 for good on the first frame that is not a complete v3 `Request`),
dispatching requests to the Bookie, writing responses coalesced per connection, and every bound that
keeps one connection from hurting the others.

The reactor never waits:
- The requests of one socket read are handled in runs: consecutive ADDs (v2, or v3 without
  DEFERRED_SYNC) are decoded in one Cython call and go to `Bookie.add_entries` as one batch; consecutive
  plain READs are answered from the storage's memory caches in one Cython call (bkfast.net.v2_handler,
  bkfast.net.v3_handler). Anything else takes the general path, in arrival order.
- A read that memory cannot answer runs on the read pool (`numReadWorkerThreads`, bkfast.net.read_pool);
  its answer comes back in the pool's batched delivery. Long-poll waits are reactor timers.
- When the write cache or the journal queue is full, the Bookie refuses the adds at once
  (StorageBusyError): the connection keeps the rest of its frames, stops reading its socket, and goes on
  when the Bookie announces room; adds still waiting after `dbStorage_maxThrottleTimeMs` are answered
  ETOOMANYREQUESTS.
- Output is bounded per connection: a run of reads stops once `serverConnectionOutputLimitBytes` of
  answers are queued; the connection is the transport's streaming producer, so once Twisted's buffer is
  full it stops taking requests (and reading its socket) until the peer drains it, and a peer that does
  not drain within `waitTimeoutOnResponseBackpressureMs` is disconnected. Reads queued on the pool per
  connection are bounded too, so late answers cannot pile up either; long polls woken together (one add
  moves the LAC past all of them) answer only while the output is under the limit, the rest as the peer
  drains (`when_output_room`).

Stats: Java's `bookkeeper_server_*` (bkfast.net.request_stats) are recorded per batch: one timestamp per
socket read (`arrival_ns`, the arrival of every request it brought; held frames keep theirs), one call
per batch of adds or memory reads; the factory registers Java's gauges (requests in progress, blocked
connections, the executor gauges of the reactor as BookieWriteThreadPool's thread and of the read pool).

TLS: START_TLS, the handshake and the authentication gate live in bkfast.net.tls; a connection only asks
`gate is not None` once per run of frames (Twisted's TLS protocol then sits between it and the socket,
and keeps it as the streaming producer, so the output bound holds under TLS too).

Threads: everything here runs on the reactor thread. The Bookie is built by the server's owner with
`dispatcher=make_dispatcher(reactor)`, so each journal group commit comes back in ONE callFromThread;
completions append to their connection's FrameBuilder and mark it dirty, and every dirty connection is
flushed with ONE transport.write right after the batch.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Any

from twisted.internet import protocol
from twisted.internet.interfaces import IHandshakeListener
from zope.interface import implementer

from bkfast.bookie.interface import ServerBookie
from bkfast.bookie.stats import BookieStats
from bkfast.codec import FrameBuilder, FrameSplitter
from bkfast.errors import BKTooManyRequestsException, FrameError, StorageBusyError
from bkfast.net import add_runs, add_workers, v2_handler, v3_handler
from bkfast.net import tls as conn_tls
from bkfast.net.add_workers import AddWorker
from bkfast.net.read_pool import ReadPool
from bkfast.net.request_stats import HIGH_PRIORITY_POOL, READ_POOL, WRITE_POOL, RequestStats
from bkfast.net.write_now import write_now
from bkfast.stats import Counter, OpStats, now_ns

log = logging.getLogger(__name__)

# Pause reading from a connection with this many adds in flight; resume below half of it.
CONNECTION_MAX_INFLIGHT_ADDS = 10000
# Reads of one connection queued on the read pool or waiting as long polls before it stops taking more;
# fewer when its answers are big: what they bring back stays within READ_POOL_OUTPUT_FACTOR times the
# connection's output limit (at least CONNECTION_MIN_PENDING_READS reads).
CONNECTION_MAX_PENDING_READS = 512
CONNECTION_MIN_PENDING_READS = 8
READ_POOL_OUTPUT_FACTOR = 4
RECV_BUFFER_SIZE = 256 * 1024  # bytes per socket read (Twisted's default is 64 KiB)

# Block reasons: why a connection takes no more requests for now.
ROOM = "room"          # write cache / journal queue full
OUTPUT = "output"      # the peer does not read its answers fast enough
ADDS = "adds"          # too many adds in flight on this connection
READS = "reads"        # too many reads queued on the pool for this connection


# The cores a host needs before an add worker runs by default: the worker and the reactor each want one,
# the journal and flush threads another. Measured on 2 cores (docs/threads.md, three pairs), the worker costs
# ~0.2 us of CPU per add in hand-offs and 0-15% of the adds/s; it pays only once the reactor is the bound.
ADD_WORKER_MIN_CORES = 4

# Server factories with answers waiting to be written (mark_dirty adds, flush removes): a dispatched journal
# batch, and a worker's hand-back, flush them right after it ran. Iterating a WeakSet of every live factory
# instead was 7% of the reactor's GIL-held time under adds (py-spy).
_DIRTY_FACTORIES: set[BookieServerFactory] = set()


def flush_all() -> None:
    if _DIRTY_FACTORIES:
        for factory in tuple(_DIRTY_FACTORIES):
            factory.flush()


def _run_and_flush(run, batch) -> None:
    try:
        run(batch)
    finally:
        # The batch's acknowledgements go out now, one write per connection, instead of one reactor
        # iteration later (callLater(0)): ~10% of a flush-when-empty add's latency.
        flush_all()


def make_dispatcher(reactor):
    """The Bookie's `dispatcher`: hand a whole journal batch to the reactor in ONE callFromThread."""
    return lambda run, batch: reactor.callFromThread(_run_and_flush, run, batch)


@dataclass(frozen=True)
class ServerSettings:
    """The server's keys as typed values, built once by `from_conf` at the edge (bkfast.server): the factory
    never parses a configuration. Defaults are BookKeeper's (bkfast.conf_keys)."""

    max_frame_size: int = 5242880                         # nettyMaxFrameSizeBytes
    max_pending_adds: int = 10000                         # maxPendingAddRequestsPerThread (0: unbounded)
    tcp_no_delay: bool = True                             # serverTcpNoDelay
    output_limit: int = 1024 * 1024                       # serverConnectionOutputLimitBytes
    backpressure_timeout_s: float | None = 60.0           # waitTimeoutOnResponseBackpressureMs (<= 0: None)
    throttle_s: float = 10.0                              # dbStorage_maxThrottleTimeMs
    read_threads: int = 8                                 # numReadWorkerThreads (0: reads on the reactor)
    add_threads: int = 0                                  # numAddWorkerThreads (0: adds taken on the reactor;
                                                          # unset: add_worker_threads_from_conf)
    max_pending_reads: int = 10000                        # maxPendingReadRequestsPerThread

    @classmethod
    def from_conf(cls, conf) -> ServerSettings:
        backpressure_ms = conf.get("waitTimeoutOnResponseBackpressureMs")
        return cls(max_frame_size=conf.get("nettyMaxFrameSizeBytes"),
                   max_pending_adds=conf.get("maxPendingAddRequestsPerThread") or 0,
                   tcp_no_delay=conf.get("serverTcpNoDelay"),
                   output_limit=conf.get("serverConnectionOutputLimitBytes"),
                   backpressure_timeout_s=backpressure_ms / 1000.0 if backpressure_ms > 0 else None,
                   throttle_s=max(conf.get("dbStorage_maxThrottleTimeMs"), 0) / 1000.0,
                   read_threads=conf.get("numReadWorkerThreads"),
                   add_threads=add_worker_threads_from_conf(conf),
                   max_pending_reads=conf.get("maxPendingReadRequestsPerThread"))


def add_worker_threads_from_conf(conf, cores: int | None = None) -> int:
    """The add workers to run (bkfast.net.add_workers): numAddWorkerThreads when the configuration sets it
    (0: adds taken on the reactor, as Java handles them on its I/O thread; more than one is run as one,
    since the runs of several would take turns on the ledger lock); unset, one on a host with
    ADD_WORKER_MIN_CORES cores or more, none below (docs/threads.md)."""
    if conf.is_set("numAddWorkerThreads"):
        wanted = conf.get("numAddWorkerThreads")
        if wanted > 1:
            log.info("numAddWorkerThreads=%d: running one add worker (the runs of several would take turns "
                     "on the ledger lock)", wanted)
        return min(wanted, 1)
    if cores is None:
        # The cores this process may run on (a cpuset or taskset narrows them), not the host's count.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 1 if cores >= ADD_WORKER_MIN_CORES else 0


class BookieServerFactory(protocol.ServerFactory):
    """Serves one Bookie to any number of connections."""

    def __init__(self, bookie: ServerBookie, settings: ServerSettings, reactor=None, security=None):
        """`security`: the TLS context and authorizer (bkfast.net.tls.ServerSecurity); None: both off."""
        if reactor is None:
            from twisted.internet import reactor as default_reactor
            reactor = default_reactor
        self.bookie = bookie
        self.settings = settings
        self.reactor = reactor
        self.max_frame_size = settings.max_frame_size
        self.max_pending_adds = settings.max_pending_adds
        self.tcp_no_delay = settings.tcp_no_delay
        self.output_limit = settings.output_limit
        self.backpressure_timeout_s = settings.backpressure_timeout_s
        self.throttle_s = settings.throttle_s
        self.pending_adds = 0
        # The handlers' run fast paths (always on): a socket read's ADDs go to the Bookie in one call, and
        # plain READs are first looked up in memory.
        self.batch_adds = True
        self.read_cached = bookie.memory_lookup()
        # The add fast path (bkfast.net.add_runs, bkfast.bookie.fast_adds) when ledger storage has one.
        self.add_runs = bookie.add_runs()
        # numAddWorkerThreads > 0: the runs take their adds on the add worker, not here (bkfast.net.add_workers).
        self.add_worker = (AddWorker(reactor, self.add_runs, flush_all)
                           if settings.add_threads > 0 and self.add_runs is not None else None)
        # TLS (START_TLS) and authorization, both off unless configured (bkfast.net.tls).
        self.security: conn_tls.ServerSecurity | None = security
        self.connections: set[BookieServerProtocol] = set()
        self._dirty: set[BookieServerProtocol] = set()
        self._flush_call = None
        self._waiting_for_room: set[BookieServerProtocol] = set()
        threads = settings.read_threads
        self.read_pool = ReadPool(reactor, threads, settings.max_pending_reads,
                                  flush_all) if threads > 0 else None
        self.pending_reads = 0          # reads on the read pool or waiting as long polls, all connections
        self._init_stats()
        bookie.set_room_listener(lambda: reactor.callFromThread(self.room_available))
        # Turning read-only (a full disk) answers held adds at once (EREADONLY), not at the deadline.
        bookie.add_state_listener(lambda read_only: reactor.callFromThread(self.room_available))

    def _init_stats(self) -> None:
        """Java's `bookkeeper_server` stats into the Bookie's stats root (none: a registry that records
        nothing), and the Bookie's own read stats the memory fast path records into."""
        pool = self.read_pool
        self.stats = RequestStats(self.bookie.stats_root, pool.size if pool is not None else 0, self.bookie)
        self.bookie_stats: BookieStats | None = self.bookie.stats
        # Handed to the Cython read fast path (typed arguments): per entry size, bytes read.
        self.entry_bytes: OpStats | None = self.bookie.stats.read_entry_bytes
        self.read_bytes: Counter | None = self.bookie.stats.read_bytes
        self._register_gauges()

    def _register_gauges(self) -> None:
        """Java's gauges of the request processor, read at scrape time (from another thread)."""
        server, stats = self.stats.logger, self.stats
        server.gauge("ADD_ENTRY_IN_PROGRESS", lambda: self.pending_adds)
        server.gauge("READ_ENTRY_IN_PROGRESS", lambda: self.pending_reads)
        server.gauge("ADD_ENTRY_BLOCKED", lambda: self.blocked_connections(ROOM, ADDS))
        server.gauge("READ_ENTRY_BLOCKED", lambda: self.blocked_connections(READS))
        # The reactor is the one thread that processes adds, as Java's default one-thread write pool.
        server.gauge(f"{WRITE_POOL}_threads", lambda: 1)
        server.gauge(f"{WRITE_POOL}_max_queue_size", lambda: self.max_pending_adds if self.max_pending_adds > 0 else -1)
        reactor = server.scope_label("thread", f"{WRITE_POOL}-OrderedExecutor-0-0")
        reactor.gauge("thread_executor_completed", lambda: stats.reactor_tasks)
        reactor.gauge("thread_executor_queue", self.held_requests)
        reactor.gauge("thread_executor_tasks_completed", lambda: stats.reactor_tasks - stats.reactor_failed)
        reactor.gauge("thread_executor_tasks_failed", lambda: stats.reactor_failed)
        reactor.gauge("thread_executor_tasks_rejected", lambda: stats.reactor_rejected)
        if self.read_pool is not None:
            self.read_pool.register_gauges(server, READ_POOL)
        else:                           # numReadWorkerThreads=0: reads run on the reactor
            server.gauge(f"{READ_POOL}_threads", lambda: 0)
            server.gauge(f"{READ_POOL}_max_queue_size", lambda: 0)
        # No high-priority pool: fencing reads go to the read pool, recovery adds run with the others.
        server.gauge(f"{HIGH_PRIORITY_POOL}_threads", lambda: 0)
        server.gauge(f"{HIGH_PRIORITY_POOL}_max_queue_size", lambda: 0)

    def blocked_connections(self, *reasons: str) -> int:
        """Connections that take no requests now for one of these reasons (any thread)."""
        return sum(1 for conn in tuple(self.connections) if not conn.blocked.isdisjoint(reasons))

    def held_requests(self) -> int:
        """Requests received and not handled yet: the held frames of blocked connections (any thread)."""
        return sum(max(0, len(conn.held) - conn.held_at) for conn in tuple(self.connections))

    def buildProtocol(self, addr):
        p = BookieServerProtocol(self)
        p.factory = self
        return p

    def stopFactory(self):
        if self.add_worker is not None:
            self.add_worker.stop()
            self.add_worker = None
        if self.read_pool is not None:
            self.read_pool.stop()
            self.read_pool = None

    # --- coalesced writes -----------------------------------------------------------------------
    def mark_dirty(self, conn: BookieServerProtocol) -> None:
        self._dirty.add(conn)
        _DIRTY_FACTORIES.add(self)
        if self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()
        _DIRTY_FACTORIES.discard(self)
        dirty, self._dirty = self._dirty, set()
        for conn in dirty:
            conn.flush()

    # --- room for adds ----------------------------------------------------------------------------
    def wait_for_room(self, conn: BookieServerProtocol) -> None:
        self._waiting_for_room.add(conn)

    def room_available(self) -> None:
        waiting, self._waiting_for_room = self._waiting_for_room, set()
        for conn in waiting:
            conn.unblock(ROOM)
        self.flush()

    # --- disk info ------------------------------------------------------------------------------
    def disk_space(self) -> tuple[int, int]:
        """(total, free) bytes of the ledger directories' file systems, each counted once."""
        seen = set()
        total = free = 0
        for d in self.bookie.ledger_dirs:
            try:
                st = os.statvfs(d)
                dev = os.stat(d).st_dev
            except OSError:
                continue
            if dev in seen:
                continue
            seen.add(dev)
            total += st.f_blocks * st.f_frsize
            free += st.f_bavail * st.f_frsize
        return total, free


@implementer(IHandshakeListener)
class BookieServerProtocol(protocol.Protocol):
    """One client connection."""

    # Twisted's ITransport is a zope interface, which mypy reads as a class with unbound methods.
    transport: Any

    def __init__(self, factory: BookieServerFactory):
        self.factory = factory
        self.bookie = factory.bookie
        self.splitter = FrameSplitter(factory.max_frame_size)
        self.out = FrameBuilder()
        self.v2 = False
        self.connected = False
        self.inflight_adds = 0
        # Not None while a socket read of this connection is at the add worker: the reads that came since.
        self.worker_backlog: list | None = None
        self.worker_backlog_bytes = 0
        self.worker_paused_reading = False  # reading stopped while the backlog is over its bound
        self.pending_reads = 0
        # Recent pool answers' size, biased to the largest; None until the first (the limit is then the least).
        self.read_answer_size: int | None = None
        self.pending_reads_limit = self._pending_reads_limit()
        # ledger id -> reads of it queued on the read pool: its later reads queue behind them (in order).
        self.reading_ledgers: dict[int, int] = {}
        self.peer = "?"
        # Frames received but not handled yet (the connection is blocked), and the first of them.
        self.held: list = []
        self.held_at = 0
        self.blocked: set[str] = set()
        self.reading_paused = False
        self.output_paused = False          # Twisted's write buffer is past its size (pauseProducing)
        # Answers waiting for the peer to drain the output (woken long polls, see when_output_room).
        self.deferred: deque = deque()
        self.room_deadline: float | None = None
        self._room_timer = None
        self._backpressure_timer = None
        # Not None while requests are not served normally: not authenticated yet, or switching to TLS.
        self.gate = factory.security.initial_gate() if factory.security is not None else None
        self.tls_timer = None
        self.tls_done = False
        self.start_tls_request = None
        self.tls_chunks: list | None = None      # decrypted data of one socket read, being gathered
        # Stats: when the socket read being handled arrived (every request it brought arrived then), when
        # the oldest held frames did, and since when each block reason holds (BLOCKED_WAIT, CHANNEL_WRITE).
        self.arrival_ns = now_ns()
        self.held_arrival_ns = self.arrival_ns
        self.blocked_since: dict[str, int] = {}

    # --- connection lifecycle -----------------------------------------------------------------
    def connectionMade(self):
        self.connected = True
        self.factory.connections.add(self)
        try:
            peer = self.transport.getPeer()
            self.peer = f"{peer.host}:{peer.port}"
        except Exception:
            pass
        # Twisted reads 64 KiB per doRead; a whole read's ADDs are one batch, so bigger reads mean fewer
        # reactor iterations and batches (16 KiB adds: 4 per read before; 256 KiB measured best of
        # 64 KiB, 256 KiB and 1 MiB). recv shrinks the buffer to what arrived: small reads cost nothing.
        if hasattr(self.transport, "bufferSize"):
            self.transport.bufferSize = RECV_BUFFER_SIZE
        if self.factory.tcp_no_delay:
            try:
                self.transport.setTcpNoDelay(True)
            except Exception:
                pass
        # Twisted calls pauseProducing when its write buffer passes bufferSize, resumeProducing once the
        # peer has drained it: the connection's output bound.
        try:
            self.transport.registerProducer(self, True)
        except Exception:  # a transport without producer support (test doubles)
            pass

    def connectionLost(self, reason=None):
        self.connected = False
        self.factory.connections.discard(self)
        self.factory._waiting_for_room.discard(self)
        self.held = []
        self.deferred.clear()
        self._cancel_backpressure_timer()
        timer, self._room_timer = self._room_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        if self.tls_timer is not None or self.gate is not None:
            conn_tls.connection_lost(self, reason)

    def close(self, why: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, why)
        self.flush()
        self.connected = False
        self.transport.loseConnection()

    def flush(self) -> None:
        if len(self.out) and self.connected:
            write_now(self.transport, self.out.take())
        elif len(self.out):
            self.out.take()
        if self.deferred and self.connected and not self.output_paused:
            self._run_deferred()

    def when_output_room(self, answer) -> None:
        """Call answer() (it appends an answer) now if the output is under its limit, else once the peer
        has drained it: a burst of answers that were not asked for by this read of the socket (long
        polls woken together: 512 of a 1 MiB entry grew the bookie by 800 MB) keeps within the bound."""
        if self.deferred or self.output_paused or len(self.out) >= self.factory.output_limit:
            self.deferred.append(answer)
            if not self.output_paused:
                self.factory.mark_dirty(self)   # the flush after this batch writes out, then goes on
            return
        answer()

    def _run_deferred(self) -> None:
        """Deferred answers up to the output limit at a time, each lot handed to Twisted, until none is
        left or Twisted pauses the connection (resumeProducing goes on)."""
        limit = self.factory.output_limit
        deferred = self.deferred
        while deferred and self.connected and not self.output_paused:
            while deferred and len(self.out) < limit:
                deferred.popleft()()
            if len(self.out):
                write_now(self.transport, self.out.take())

    def respond(self) -> None:
        """A response was appended: have it written with this batch's other responses."""
        if self.connected:
            self.factory.mark_dirty(self)

    # --- the transport's producer interface (output bound) ----------------------------------------
    def pauseProducing(self):
        self.output_paused = True
        self.block(OUTPUT)
        timeout = self.factory.backpressure_timeout_s
        if timeout is not None and self._backpressure_timer is None:
            self._backpressure_timer = self.factory.reactor.callLater(timeout, self._backpressure_expired)

    def resumeProducing(self):
        self.output_paused = False
        self._cancel_backpressure_timer()
        if self.deferred and self.connected:
            self._run_deferred()            # older than any held request: answered first
            if self.output_paused:
                return
        self.unblock(OUTPUT)

    def stopProducing(self):
        self.connected = False

    def _cancel_backpressure_timer(self) -> None:
        timer, self._backpressure_timer = self._backpressure_timer, None
        if timer is not None and timer.active():
            timer.cancel()

    def _backpressure_expired(self) -> None:
        self._backpressure_timer = None
        since = self.blocked_since.pop(OUTPUT, None)
        if since is not None and self.connected and OUTPUT in self.blocked:
            self.factory.stats.channel_write.fail_ns(now_ns() - since)      # answers dropped with the peer
        if self.connected and OUTPUT in self.blocked:
            log.warning("closing connection from %s: it has not read its answers for %.1f s "
                        "(waitTimeoutOnResponseBackpressureMs)", self.peer, self.factory.backpressure_timeout_s)
            self.connected = False
            self.held = []
            self.deferred.clear()
            self.out.take()
            self.transport.abortConnection()

    def _room_wait_expired(self) -> None:
        self._room_timer = None
        self.factory._waiting_for_room.discard(self)
        self.unblock(ROOM)

    # --- blocking: hold frames, stop reading, go on later ------------------------------------------
    def block(self, reason: str) -> None:
        if reason not in self.blocked:
            self.blocked_since[reason] = now_ns()
        self.blocked.add(reason)
        if not self.reading_paused and self.connected:
            self.reading_paused = True
            self.transport.pauseProducing()

    def unblock(self, reason: str) -> None:
        if reason not in self.blocked:
            return
        self.blocked.discard(reason)
        self._blocked_wait(reason)
        if self.blocked or not self.connected:
            return
        self.process_held()
        if not self.blocked and self.reading_paused and self.connected:
            self.reading_paused = False
            self.transport.resumeProducing()

    def _blocked_wait(self, reason: str) -> None:
        """The connection took requests again: how long `reason` held it (Java's *_BLOCKED_WAIT, and
        CHANNEL_WRITE for an output the peer did not read)."""
        since = self.blocked_since.pop(reason, None)
        if since is None:
            return
        stats = self.factory.stats
        stat = (stats.add_blocked_wait if reason in (ROOM, ADDS) else stats.read_blocked_wait if reason == READS
                else stats.channel_write)
        stat.ok_ns(now_ns() - since)

    def hold(self, frames: list, start: int) -> None:
        """Keep frames[start:] for later (the connection just blocked)."""
        if frames is self.held:
            self.held_at = start
        else:
            self.held = frames
            self.held_at = start
            self.held_arrival_ns = self.arrival_ns

    def _hold_more(self, frames: list) -> None:
        """Queue frames that arrived now behind the held ones (held frames keep the oldest arrival)."""
        if self.held_at >= len(self.held):
            self.held_arrival_ns = self.arrival_ns
        self.held = self.held[self.held_at:] + frames
        self.held_at = 0

    def process_held(self) -> None:
        frames, start = self.held, self.held_at
        self.held, self.held_at = [], 0
        if start < len(frames):
            arrival, self.arrival_ns = self.arrival_ns, self.held_arrival_ns
            try:
                self.process(frames, start)
            finally:
                self.arrival_ns = arrival

    # --- input ----------------------------------------------------------------------------------
    def dataReceived(self, data):
        if self.tls_chunks is not None:        # inside one TLS delivery: handled at its end (bkfast.net.tls)
            self.tls_chunks.append(data)
            return
        if not self.connected:
            return
        self.arrival_ns = now_ns()
        if not add_workers.hand_over(self, [data]):
            self.split_here(data)

    def pieces_received(self, pieces: list[bytes]) -> None:
        """Socket reads that waited behind the connection's read at the add worker, in order."""
        self.arrival_ns = now_ns()
        if not add_workers.hand_over(self, pieces):
            self.split_here(b"".join(pieces))       # not adds first, or no run now: split here as one read

    def split_here(self, data) -> None:
        """Split a socket read on the reactor (its plain adds taken by the run when there is no worker)."""
        try:
            frames = add_runs.split_taking_adds(self, data)
        except FrameError as err:
            self.frames_split(err.frames, err)
            return
        self.frames_split(frames)

    def frames_split(self, frames: list, err: FrameError | None = None) -> None:
        """The frames of a socket read, split here or by the add worker: handled in order, or held; after
        them, a bad frame (`err`) closes the connection."""
        if err is not None:
            if self.held or self.blocked:
                self._hold_more(frames)
                frames = []
            if frames:
                self.process(frames, 0)
            if self.connected:
                self.close(f"bad frame: {err}")
            return
        if self.held or self.blocked:
            # Frames that arrived before the pause took effect queue behind the held ones.
            self._hold_more(frames)
            return
        self.process(frames, 0)

    def process(self, frames: list, i: int) -> None:
        """Handle frames[i:] in order, in runs; stop (and hold the rest) when the connection blocks."""
        n = len(frames)
        limit = self.factory.output_limit
        while i < n:
            if not self.connected:
                return
            if self.blocked:
                self.hold(frames, i)
                return
            if len(self.out) >= limit:
                # Hand the answers to Twisted now: past its buffer size it pauses this connection.
                self.flush()
                if self.blocked:
                    self.hold(frames, i)
                    return
            if self.gate is not None:
                i = conn_tls.gated(self, frames, i)
            elif self.v2:
                i = v2_handler.handle_run(self, frames, i)
            else:
                i = v3_handler.handle_run(self, frames, i)
        if len(self.out):
            self.respond()

    # --- TLS (bkfast.net.tls) ------------------------------------------------------------------------
    def start_tls(self, request, reply) -> None:
        conn_tls.start_tls(self, request, reply)

    def handshakeCompleted(self) -> None:
        conn_tls.handshake_completed(self)

    # --- adds -------------------------------------------------------------------------------------
    def submit_adds(self, adds: list, ids: list, answer, queued: bool = False) -> int:
        """Hand a batch of decoded ADDs to the Bookie; `answer(error, ids)` writes the responses once they
        are durable (or refused). Returns how many of them were taken: fewer than len(adds) when the
        Bookie had no room for the rest, which the caller holds (the connection is blocked). `queued`:
        record WRITE_THREAD_QUEUED_LATENCY for them (v2 adds, as Java's WriteEntryProcessor)."""
        stats = self.factory.stats
        arrival, start = self.arrival_ns, now_ns()
        frames_in_run = len(adds)
        limit = self.factory.max_pending_adds
        cut = False
        if limit > 0:
            room = max(limit - self.factory.pending_adds, 0)
            if room < len(adds):
                cut = True
                answer(TOO_MANY, ids[room:])
                stats.adds_rejected(len(adds) - room, TOO_MANY, arrival)
                adds, ids = adds[:room], ids[:room]
                if not adds:
                    return frames_in_run
        n = len(adds)
        self.inflight_adds += n
        self.factory.pending_adds += n

        def done(accepted, error):
            # Once per journal share of the batch (bkfast.bookie: Bookie.add_entries).
            done_ids = ids if accepted is None else [ids[i] for i in accepted]
            if self.adds_completed(len(done_ids), error, arrival, start):
                answer(error, done_ids)
                self.respond()

        try:
            failures = self.bookie.add_entries(adds, done)
        except Exception as err:  # a bug: fail the whole batch rather than leave adds unanswered
            log.exception("add batch of %d entries failed", n)
            stats.reactor_failed += n
            failures = [(i, err) for i in range(n)]
        taken = (self._refused_adds(failures, ids, answer, arrival, start, frames_in_run, cut) if failures
                 else frames_in_run)
        processed = n if taken == frames_in_run else taken
        stats.reactor_tasks += processed
        if queued and processed:
            stats.write_queued.ok_ns_many(processed, start - arrival)
        if taken == frames_in_run:
            self.room_deadline = None
            timer, self._room_timer = self._room_timer, None
            if timer is not None and timer.active():
                timer.cancel()
        if ADDS not in self.blocked and self.inflight_adds > CONNECTION_MAX_INFLIGHT_ADDS:
            self.block(ADDS)
        return taken

    def _refused_adds(self, failures: list, ids: list, answer, arrival: int, start: int, frames_in_run: int,
                      cut: bool = False) -> int:
        """Answer the adds the Bookie refused at once, and hold those it had no room for (StorageBusyError:
        that add and every later one of the batch). Returns how many frames of the run were taken. `cut`:
        the run's tail was already answered ETOOMANYREQUESTS (maxPendingAddRequestsPerThread), so the adds
        without room are refused too: holding them would hold, and later answer again, that tail."""
        self.adds_finished(len(failures))
        busy_from = None
        refused: dict = {}
        for i, error in failures:
            if isinstance(error, StorageBusyError):
                if busy_from is None:
                    busy_from = i
                continue
            refused.setdefault(error, []).append(ids[i])
        for error, refused_ids in refused.items():
            answer(error, refused_ids)
            self.factory.stats.adds_refused(len(refused_ids), error, arrival, start)
        taken = frames_in_run
        if busy_from is not None:
            now = self.factory.reactor.seconds()
            if self.room_deadline is None:
                self.room_deadline = now + self.factory.throttle_s
            if cut or now >= self.room_deadline:
                # Waited dbStorage_maxThrottleTimeMs for room (or the tail was cut): refuse these, as Java's
                # throttle does.
                answer(TOO_MANY, ids[busy_from:])
                self.factory.stats.adds_refused(len(ids) - busy_from, TOO_MANY, arrival, start, rejected=True)
            else:
                taken = busy_from
                self.factory.wait_for_room(self)
                self.block(ROOM)
                # Room may never come (a failing flush): at the deadline the held adds are answered
                # ETOOMANYREQUESTS and the connection's other requests go on.
                if self._room_timer is None or not self._room_timer.active():
                    self._room_timer = self.factory.reactor.callLater(
                        self.room_deadline - now, self._room_wait_expired)
        self.respond()
        return taken

    def add_started(self) -> None:
        self.adds_started(1)

    def adds_started(self, n: int) -> None:
        self.inflight_adds += n
        self.factory.pending_adds += n
        if self.inflight_adds > CONNECTION_MAX_INFLIGHT_ADDS:
            self.block(ADDS)

    def add_finished(self) -> None:
        self.adds_finished(1)

    def adds_completed(self, n: int, error, arrival: int, start: int) -> bool:
        """n adds of one batch or run completed by their journal (error None: durable): counted and
        recorded; whether the connection is still there to answer them."""
        self.adds_finished(n)
        self.factory.stats.adds_done(n, error, arrival, start)
        return bool(self.connected)

    def adds_finished(self, n: int) -> None:
        self.inflight_adds -= n
        self.factory.pending_adds -= n
        if ADDS in self.blocked and self.inflight_adds < CONNECTION_MAX_INFLIGHT_ADDS // 2:
            self.unblock(ADDS)

    def too_many_adds(self) -> bool:
        limit = self.factory.max_pending_adds
        return limit > 0 and self.factory.pending_adds >= limit

    # --- reads off the reactor --------------------------------------------------------------------
    def read_async(self, ledger_id: int, read, deliver) -> None:
        """Run read() on the read pool (inline when numReadWorkerThreads=0) and deliver(result or the
        exception it raised) on the reactor. Reads of one ledger run in order."""
        pool = self.factory.read_pool
        if pool is None:
            if not self.reading_ledgers.get(ledger_id):
                self.reading_ledgers.pop(ledger_id, None)
            try:
                result = read()
            except Exception as error:
                result = error
            deliver(result)
            return

        reading = self.reading_ledgers

        def delivered(result):
            size = _answer_size(result)
            if size:
                previous = self.read_answer_size
                self.read_answer_size = size if previous is None else max(size, previous * 3 // 4)
                self.pending_reads_limit = self._pending_reads_limit()
            left = reading.get(ledger_id, 1) - 1
            if left > 0:
                reading[ledger_id] = left
            else:
                reading.pop(ledger_id, None)
            self.reads_finished(1)
            if self.connected:
                deliver(result)
                self.respond()

        if not pool.submit(ledger_id, read, delivered):
            if not reading.get(ledger_id):
                reading.pop(ledger_id, None)
            self.factory.stats.read_rejected.inc()
            deliver(TOO_MANY)
            self.respond()
            return
        reading[ledger_id] = reading.get(ledger_id, 0) + 1
        self.reads_started(1)

    def _pending_reads_limit(self) -> int:
        if self.read_answer_size is None:
            return CONNECTION_MIN_PENDING_READS
        budget = READ_POOL_OUTPUT_FACTOR * self.factory.output_limit
        return max(CONNECTION_MIN_PENDING_READS,
                   min(CONNECTION_MAX_PENDING_READS, budget // max(self.read_answer_size, 1)))

    def read_room(self) -> int:
        """How many more reads this connection may put on the read pool now (at least 1: that one blocks it)."""
        return max(1, self.pending_reads_limit - self.pending_reads)

    def reads_started(self, n: int) -> None:
        self.pending_reads += n
        self.factory.pending_reads += n
        if self.pending_reads >= self.pending_reads_limit:
            self.block(READS)

    def reads_finished(self, n: int) -> None:
        self.pending_reads -= n
        self.factory.pending_reads -= n
        if READS in self.blocked and self.pending_reads < self.pending_reads_limit // 2:
            self.unblock(READS)


def _answer_size(result) -> int:
    """Bytes a read-pool result brings back: an entry, or a list of entries (batch reads); 0 otherwise."""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return len(result)
    if isinstance(result, (list, tuple)):
        return sum(len(e) for e in result if isinstance(e, (bytes, bytearray, memoryview)))
    return 0


TOO_MANY = BKTooManyRequestsException("the bookie is throttling requests: too many pending")

__all__ = ["BookieServerFactory", "BookieServerProtocol", "ServerSettings", "make_dispatcher",
           "CONNECTION_MAX_INFLIGHT_ADDS"]
