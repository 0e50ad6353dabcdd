"""The bookie's network server: v2 and v3 BookKeeper protocols on one Twisted port.

Owns: framing (Cython FrameSplitter), telling v3 from v2 per connection (spec §2.1: every connection
starts in v3 mode and falls back to v2 for good on the first frame that is not a complete v3 `Request`),
dispatching requests to the Bookie, and writing responses coalesced per connection.

Threads: everything here runs on the reactor thread. The Bookie is built by the server's owner with
`dispatcher=make_dispatcher(reactor)`, so each journal group commit comes back in ONE callFromThread;
completions append to their connection's FrameBuilder and mark it dirty, and every dirty connection is
flushed with ONE transport.write in a callLater(0) after the batch.

Reads run inline on the reactor: DbLedgerStorage reads are served from memory (write cache, read-ahead
cache) or a pread of an entry log, which is short enough not to warrant a thread hop.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import weakref

from twisted.internet import protocol

from bkfast.codec import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_RECOVERY_ADD,
    OP_ADD,
    OP_AUTH,
    OP_BATCH_READ,
    OP_READ,
    FrameBuilder,
    FrameSplitter,
    decode_request,
    decode_v2_adds,
)
from bkfast.errors import (
    BKError,
    BKNoSuchEntryException,
    FrameError,
    V2Rc,
    v2_rc_for,
)
from bkfast.net import v3_handler

log = logging.getLogger(__name__)

# Pause reading from a connection with this many adds in flight; resume below half of it.
CONNECTION_MAX_INFLIGHT_ADDS = 10000
AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"
RECV_BUFFER_SIZE = 256 * 1024  # bytes per socket read (Twisted's default is 64 KiB)
_HEADER = struct.Struct(">I")


def v2_header(version: int, opcode: int) -> int:
    """Java's PacketHeader.toInt for a response: version 0 (legacy) is the bare opcode."""
    return opcode if version == 0 else ((version & 0xFF) << 24) | ((opcode & 0xFF) << 16)


# Live server factories: a dispatched journal batch flushes their dirty connections right after it ran.
_FACTORIES: weakref.WeakSet = weakref.WeakSet()


def _run_and_flush(run, batch) -> None:
    try:
        run(batch)
    finally:
        # The batch's acknowledgements go out now, one write per connection, instead of one reactor
        # iteration later (callLater(0)): ~10% of a flush-when-empty add's latency.
        for factory in list(_FACTORIES):
            if factory._dirty:
                factory.flush()


def make_dispatcher(reactor):
    """The Bookie's `dispatcher`: hand a whole journal batch to the reactor in ONE callFromThread."""
    return lambda run, batch: reactor.callFromThread(_run_and_flush, run, batch)


def lac_of_buffer(buf: bytes) -> int:
    """The LAC inside an explicit-LAC buffer (spec §3.5; scoped layout when the top bit is set)."""
    if buf and buf[0] & 0x80:
        return struct.unpack_from(">q", buf, 17)[0] if len(buf) >= 25 else -1
    return struct.unpack_from(">q", buf, 8)[0] if len(buf) >= 16 else -1


class BookieServerFactory(protocol.ServerFactory):
    """Serves one Bookie to any number of connections."""

    def __init__(self, bookie, conf, reactor=None):
        if reactor is None:
            from twisted.internet import reactor as default_reactor
            reactor = default_reactor
        self.bookie = bookie
        self.conf = conf
        self.reactor = reactor
        self.max_frame_size = conf.get("nettyMaxFrameSizeBytes")
        self.max_pending_adds = conf.get("maxPendingAddRequestsPerThread") or 0
        self.tcp_no_delay = conf.get("serverTcpNoDelay")
        self.pending_adds = 0
        # A Bookie takes a whole read's ADDs in one call; anything else (test doubles) one add at a time.
        self.batch_adds = hasattr(bookie, "add_entries")
        self.connections: set[BookieServerProtocol] = set()
        self._dirty: set[BookieServerProtocol] = set()
        self._flush_call = None
        _FACTORIES.add(self)
        # Long-poll reads waiting for a ledger's LAC to pass a value: (scope, ledger) -> [watcher].
        self._lac_watchers: dict[tuple[int, int], list] = {}
        self._lac_update_ms: dict[tuple[int, int], int] = {}

    def buildProtocol(self, addr):
        p = BookieServerProtocol(self)
        p.factory = self
        return p

    # --- coalesced writes -----------------------------------------------------------------------
    def mark_dirty(self, conn: BookieServerProtocol) -> None:
        self._dirty.add(conn)
        if self._flush_call is None:
            self._flush_call = self.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        call, self._flush_call = self._flush_call, None
        if call is not None and call.active():
            call.cancel()
        dirty, self._dirty = self._dirty, set()
        for conn in dirty:
            conn.flush()

    # --- LAC tracking for long-poll reads ------------------------------------------------------
    def known_lac(self, scope_id: int, ledger_id: int) -> int:
        """max(LAC of the last stored entry, explicit LAC); raises BKNoSuchLedgerExists."""
        lac = -1
        try:
            lac = self.bookie.read_last_add_confirmed(ledger_id, scope_id)
        except BKNoSuchEntryException:
            pass
        explicit = self.bookie.get_explicit_lac(ledger_id, scope_id)
        if explicit:
            lac = max(lac, lac_of_buffer(explicit))
        return lac

    def lac_update_time(self, scope_id: int, ledger_id: int) -> int:
        return self._lac_update_ms.get((scope_id, ledger_id), int(time.time() * 1000))

    def lac_changed(self, scope_id: int, ledger_id: int) -> None:
        key = (scope_id, ledger_id)
        self._lac_update_ms[key] = int(time.time() * 1000)
        watchers = self._lac_watchers.pop(key, None)
        if not watchers:
            return
        try:
            lac = self.known_lac(scope_id, ledger_id)
        except BKError:
            lac = None
        still: list = []
        for watcher in watchers:
            if watcher.done:
                continue
            if lac is not None and lac > watcher.previous_lac:
                watcher.fire()
            else:
                still.append(watcher)
        if still:
            self._lac_watchers.setdefault(key, []).extend(still)

    def watch_lac(self, scope_id: int, ledger_id: int, watcher) -> None:
        self._lac_watchers.setdefault((scope_id, ledger_id), []).append(watcher)

    def unwatch_lac(self, scope_id: int, ledger_id: int, watcher) -> None:
        watchers = self._lac_watchers.get((scope_id, ledger_id))
        if watchers and watcher in watchers:
            watchers.remove(watcher)
            if not watchers:
                del self._lac_watchers[(scope_id, ledger_id)]

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


class BookieServerProtocol(protocol.Protocol):
    """One client connection."""

    def __init__(self, factory: BookieServerFactory):
        self.factory = factory
        self.bookie = factory.bookie
        self.splitter = FrameSplitter(factory.max_frame_size)
        self.out = FrameBuilder()
        self.v2 = False
        self.connected = False
        self.inflight_adds = 0
        self.paused = False
        self.peer = "?"

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

    def connectionLost(self, reason=None):
        self.connected = False
        self.factory.connections.discard(self)

    def close(self, why: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, why)
        self.flush()
        self.connected = False
        self.transport.loseConnection()

    def flush(self) -> None:
        if len(self.out) and self.connected:
            self.transport.write(self.out.take())
        elif len(self.out):
            self.out.take()

    def respond(self) -> None:
        """A response was appended: have it written with this batch's other responses."""
        if self.connected:
            self.factory.mark_dirty(self)

    # --- input ----------------------------------------------------------------------------------
    def dataReceived(self, data):
        if not self.connected:
            return
        try:
            frames = self.splitter.feed(data)
        except FrameError as err:
            for frame in err.frames:
                if not self.connected:
                    return
                self.handle_frame(frame)
            if self.connected:
                self.close(f"bad frame: {err}")
            return
        batch = self.factory.batch_adds
        if self.v2 and batch:
            self.handle_v2_frames(frames)
            return
        for i, frame in enumerate(frames):
            if not self.connected:
                return
            if self.v2 and batch:  # fell back to v2 on an earlier frame of this read: batch the rest
                self.handle_v2_frames(frames[i:])
                return
            self.handle_frame(frame)

    def handle_v2_frames(self, frames: list) -> None:
        """All frames of one read on a v2 connection: each run of consecutive ADDs is decoded in one
        Cython call and goes to the Bookie as ONE batch (one journal enqueue, one completion); any other
        frame goes through decode_request/handle_v2 after the ADDs before it, so requests reach the
        Bookie in arrival order."""
        i, n = 0, len(frames)
        limit = self.factory.max_pending_adds
        while i < n:
            adds, ids, j = decode_v2_adds(frames, i)
            if adds:
                if limit > 0:
                    room = limit - self.factory.pending_adds
                    if room < len(adds):
                        room = max(room, 0)
                        for ledger_id, entry_id, version in ids[room:]:
                            self.add_response(V2Rc.ETOOMANYREQUESTS, ledger_id, entry_id, version)
                        self.respond()
                        adds, ids = adds[:room], ids[:room]
                if adds:
                    self.submit_adds(adds, ids)
            if j >= n or not self.connected:
                return
            self.handle_v2_frame(frames[j])
            if not self.connected:
                return
            i = j + 1

    def handle_v2_frame(self, frame: bytes) -> None:
        """One v2 frame that is not a plain ADD (or is an ADD the batch decoder left to this path)."""
        try:
            r = decode_request(frame)
        except (FrameError, BKError, ValueError) as err:
            self.close(f"undecodable v2 frame: {err}")
            return
        try:
            self.handle_v2(r)
        except Exception as err:
            log.exception("v2 request failed")
            self.close(f"v2 request failed: {err}")

    def submit_adds(self, adds: list, ids: list) -> None:
        """Hand a batch of v2 ADDs to the Bookie; answer each once durable (or refused)."""
        n = len(adds)
        self.inflight_adds += n
        self.factory.pending_adds += n
        if not self.paused and self.inflight_adds > CONNECTION_MAX_INFLIGHT_ADDS:
            self.paused = True
            self.transport.pauseProducing()

        def done(accepted, error):
            if accepted is None:
                done_ids = ids
            else:
                done_ids = [ids[i] for i in accepted]
            self.adds_finished(len(done_ids))
            if error is None:
                rc = V2Rc.EOK
                lac_changed = self.factory.lac_changed
                for ledger_id in {t[0] for t in done_ids}:   # once per ledger per batch
                    lac_changed(0, ledger_id)
            else:
                rc = v2_rc_for(error)
            if self.connected:
                add_response = self.out.add_add_response
                for ledger_id, entry_id, version in done_ids:
                    if version == 0:
                        self.add_response(rc, ledger_id, entry_id, version)
                    else:
                        add_response(rc, ledger_id, entry_id, version)
                self.respond()

        try:
            failures = self.bookie.add_entries(adds, done)
        except Exception as err:  # a bug: fail the whole batch rather than leave adds unanswered
            log.exception("add batch of %d entries failed", n)
            failures = [(i, err) for i in range(n)]
        if failures:
            self.adds_finished(len(failures))
            if self.connected:
                for i, error in failures:
                    ledger_id, entry_id, version = ids[i]
                    self.add_response(v2_rc_for(error), ledger_id, entry_id, version)
                self.respond()

    def handle_frame(self, frame: bytes) -> None:
        if not self.v2:
            request = v3_handler.parse_request(frame)
            if request is not None:
                try:
                    v3_handler.handle(self, request)
                except Exception as err:  # never let one request kill the connection's reactor loop
                    log.exception("v3 request failed")
                    self.close(f"v3 request failed: {err}")
                return
            self.v2 = True
        try:
            request = decode_request(frame)
        except (FrameError, BKError, ValueError) as err:
            # Java's decoder throws and the pipeline closes the connection.
            self.close(f"undecodable v2 frame: {err}")
            return
        try:
            self.handle_v2(request)
        except Exception as err:
            log.exception("v2 request failed")
            self.close(f"v2 request failed: {err}")

    # --- backpressure ---------------------------------------------------------------------------
    def add_started(self) -> None:
        self.inflight_adds += 1
        self.factory.pending_adds += 1
        if not self.paused and self.inflight_adds > CONNECTION_MAX_INFLIGHT_ADDS:
            self.paused = True
            self.transport.pauseProducing()

    def add_finished(self) -> None:
        self.adds_finished(1)

    def adds_finished(self, n: int) -> None:
        self.inflight_adds -= n
        self.factory.pending_adds -= n
        if self.paused and self.inflight_adds < CONNECTION_MAX_INFLIGHT_ADDS // 2:
            self.paused = False
            if self.connected:
                self.transport.resumeProducing()

    def too_many_adds(self) -> bool:
        limit = self.factory.max_pending_adds
        return limit > 0 and self.factory.pending_adds >= limit

    # --- v2 ---------------------------------------------------------------------------------------
    def handle_v2(self, r) -> None:
        op = r.opcode
        if r.version > 2 or r.version < 0:
            self.v2_error(r, V2Rc.EBADVERSION)
            return
        if op == OP_ADD:
            self.v2_add(r)
        elif op == OP_READ:
            self.v2_read(r)
        elif op == OP_BATCH_READ:
            self.v2_batch_read(r)
        elif op == OP_AUTH:
            self.v2_auth(r)
        else:  # decode_request already refuses other opcodes
            self.close(f"v2 opcode {op}")

    # The FrameBuilder writes (version << 24 | op << 16) for every version; Java answers a legacy
    # version-0 request with the bare opcode as header, so that rare case is built here.
    def add_response(self, rc, ledger_id, entry_id, version) -> None:
        if version == 0:
            self.out.add_frame(struct.pack(">Iiqq", OP_ADD, rc, ledger_id, entry_id))
        else:
            self.out.add_add_response(rc, ledger_id, entry_id, version)

    def read_response(self, rc, ledger_id, entry_id, data, version) -> None:
        if version == 0:
            self.out.add_frame(struct.pack(">Iiqq", OP_READ, rc, ledger_id, entry_id) + bytes(data))
        else:
            self.out.add_read_response(rc, ledger_id, entry_id, data, version)

    def batch_read_response(self, rc, ledger_id, start, request_id, entries, version) -> None:
        if version == 0:
            self.out.add_frame(struct.pack(">Iiqqq", OP_BATCH_READ, rc, ledger_id, start, request_id) +
                               b"".join(struct.pack(">I", len(e)) + bytes(e) for e in entries))
        else:
            self.out.add_batch_read_response(rc, ledger_id, start, request_id, entries, version)

    def v2_error(self, r, rc: int) -> None:
        if r.opcode == OP_ADD:
            self.add_response(rc, r.ledger_id, r.entry_id, r.version)
        elif r.opcode == OP_READ:
            self.read_response(rc, r.ledger_id, r.entry_id, b"", r.version)
        elif r.opcode == OP_BATCH_READ:
            self.batch_read_response(rc, r.ledger_id, r.entry_id, r.request_id, (), r.version)
        else:
            self.close(f"error {rc} for v2 opcode {r.opcode}")
            return
        self.respond()

    def v2_add(self, r) -> None:
        ledger_id, entry_id, version = r.ledger_id, r.entry_id, r.version
        if r.entry_format != 1:
            # v2 has no room for a scope (spec scope-ids "Wire"): refuse scoped entries.
            self.v2_error(r, V2Rc.EBADREQ)
            return
        if self.too_many_adds():
            self.v2_error(r, V2Rc.ETOOMANYREQUESTS)
            return
        self.add_started()

        def done(error):
            self.add_finished()
            rc = V2Rc.EOK if error is None else v2_rc_for(error)
            if error is None:
                self.factory.lac_changed(0, ledger_id)
            if self.connected:
                self.add_response(rc, ledger_id, entry_id, version)
                self.respond()

        flags = r.flags
        self.bookie.add_entry(r.entry, r.master_key, done, recovery=bool(flags & FLAG_RECOVERY_ADD),
                              high_priority=bool(flags & (FLAG_HIGH_PRIORITY | FLAG_RECOVERY_ADD)))

    def v2_fence_then(self, r, then) -> None:
        """Fence (DO_FENCING) before a read; EUA without a key (spec §6.1)."""
        if r.master_key is None:
            self.v2_error(r, V2Rc.EUA)
            return

        def fenced(error):
            if not self.connected:
                return
            if error is not None:
                self.v2_error(r, v2_rc_for(error))
            else:
                then()

        self.bookie.fence(r.ledger_id, r.master_key, fenced)

    def v2_read(self, r) -> None:
        def read():
            try:
                data = self.bookie.read_entry(r.ledger_id, r.entry_id)
            except Exception as error:
                self.read_response(v2_rc_for(error), r.ledger_id, r.entry_id, b"", r.version)
            else:
                self.read_response(V2Rc.EOK, r.ledger_id, r.entry_id, data, r.version)
            self.respond()

        if r.flags & FLAG_DO_FENCING:
            self.v2_fence_then(r, read)
        else:
            read()

    def v2_batch_read(self, r) -> None:
        def read():
            entries = []
            rc = V2Rc.EOK
            frame_size = 24 + 8 + 4
            max_count = max(r.max_count, 1)
            for i in range(max_count):
                try:
                    data = self.bookie.read_entry(r.ledger_id, r.entry_id + i)
                except Exception as error:
                    if not entries:
                        rc = v2_rc_for(error)
                    break
                frame_size += len(data) + 4
                if entries and r.max_size > 0 and frame_size > r.max_size:
                    break
                entries.append(data)
            self.batch_read_response(rc, r.ledger_id, r.entry_id, r.request_id, entries, r.version)
            self.respond()

        if r.flags & FLAG_DO_FENCING:
            self.v2_fence_then(r, read)
        else:
            read()

    def v2_auth(self, r) -> None:
        body = _HEADER.pack(v2_header(r.version, OP_AUTH)) + v3_handler.auth_disabled_message()
        self.out.add_frame(body)
        self.respond()


__all__ = ["BookieServerFactory", "BookieServerProtocol", "make_dispatcher", "v2_header",
           "CONNECTION_MAX_INFLIGHT_ADDS"]
