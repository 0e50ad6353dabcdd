"""Java's `bookkeeper_server_*` stats of a real bookie process (issue 25): every series of Java 4.16.7's
vector by name, kind and label keys, and their values after a known workload (v2 and v3 adds, reads from
memory and from disk through the read pool, fencing, long polls, LAC, FORCE_LEDGER, bookie info, entry
lists, refused adds); and, in-process, the backpressure stats (rejections, blocked connections,
CHANNEL_WRITE) that a real peer cannot provoke deterministically."""

from __future__ import annotations

import re
import socket
import urllib.request

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from bkfast.codec import (
    FLAG_DO_FENCING,
    DigestType,
    decode_response,
    encode_add_request,
    encode_entry,
    encode_lac,
    encode_read_request,
    master_key,
)
from bkfast.conf import ServerConfiguration
from bkfast.errors import StorageBusyError
from bkfast.net.server import BookieServerFactory, ServerSettings
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.stats import Counter, OpStats, StatsRegistry
from tests import VECTORS_DIR
from tests.codec_impls import IMPLEMENTATIONS
from tests.server_bookie_double import HeldAddsBookie
from tests.server_support import BookieProcess, Client

KEY = master_key("secret")
WRONG = master_key("wrong")
CRC = DigestType.CRC32C
PROMETHEUS = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"
VECTOR = VECTORS_DIR / "java_metrics_4.16.7.txt"
READ_THREADS = 2
# Java parts bkfast does not have (docs/metrics.md): no high-priority pool, so none of its series.
NO_SUCH_PART = "BookieHighPriorityThread"
WRITE0 = {"thread": "0", "threadPool": "BookieWriteThreadPool"}
FORCE0 = {"thread": "0", "threadPool": "ForceWriteThread"}

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scrape:
    """A parsed /metrics text: kinds by family, values by (name, labels)."""

    def __init__(self, text: str):
        self.kinds: dict[str, str] = {}
        self.samples: dict[tuple[str, frozenset], float] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                self.kinds[name] = kind
            elif line and not line.startswith("#"):
                m = _LINE.match(line)
                assert m, line
                labels = frozenset(_LABEL.findall(m.group(2) or ""))
                self.samples[(m.group(1), labels)] = float(m.group(3))

    def value(self, name: str, **labels) -> float:
        key = (name, frozenset(labels.items()))
        assert key in self.samples, f"{name}{labels} not served"
        return self.samples[key]

    def ok(self, name: str, **labels) -> float:
        return self.value(name + "_count", success="true", **labels)

    def fail(self, name: str, **labels) -> float:
        return self.value(name + "_count", success="false", **labels)

    def label_sets(self, name: str) -> list[dict]:
        sample = name + "_count" if self.kinds.get(name) == "summary" else name
        return [dict(labels) for n, labels in self.samples if n == sample]


def java_series(prefix: str):
    """(kind, name, labels) of every series of the vector whose name starts with prefix."""
    for line in VECTOR.read_text().splitlines():
        m = re.match(r"^(counter|gauge|summary) (\S+) \{(.*?)\} ", line)
        if m and m.group(2).startswith(prefix):
            yield m.group(1), m.group(2), dict(kv.split("=", 1) for kv in m.group(3).split(", ") if kv)


@pytest.fixture(scope="module")
def stats_bookie(tmp_path_factory):
    """A bookie with Java's stats on, whose ledger 4 (entries 0-2) was written before a restart: its
    entries are on disk only (the stats count from the restart on)."""
    port = _free_port()
    b = BookieProcess(tmp_path_factory.mktemp("stats"), "-D", f"statsProviderClass={PROMETHEUS}",
                      "-D", f"prometheusStatsHttpPort={port}", "-D", "prometheusStatsHttpAddress=127.0.0.1",
                      "-D", f"numReadWorkerThreads={READ_THREADS}",
                      "-D", "flushInterval=600000").start()      # no flush during the test: memory stays memory
    b.stats_port = port
    try:
        with b.connect() as c:
            assert [v2_add(c, 4, e) for e in range(3)] == [0] * 3
        assert b.stop() == 0, b.log()
        b.start()
        yield b
    finally:
        assert b.stop() == 0, b.log()


def scrape(bookie) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{bookie.stats_port}/metrics", timeout=10) as resp:
        return Scrape(resp.read().decode())


def v2_add(c: Client, ledger: int, entry: int, key: bytes = KEY) -> int:
    c.send_raw(encode_add_request(key, ledger, entry, entry - 1, entry + 1, b"v2-%d" % entry, CRC))
    return decode_response(c.recv_body()).rc


def v2_read(c: Client, ledger: int, entry: int, flags: int = 0, key=None):
    c.send_raw(encode_read_request(ledger, entry, flags, key))
    return decode_response(c.recv_body())


def v3_add(c: Client, ledger: int, entry: int, key: bytes = KEY) -> int:
    body = encode_entry(ledger, entry, entry - 1, entry + 1, b"v3-%d" % entry, CRC)
    return c.v3(pb.ADD_ENTRY, addRequest=dict(ledgerId=ledger, entryId=entry, masterKey=key, body=body)).status


def v3_read(c: Client, **request):
    return c.v3(pb.READ_ENTRY, readRequest=request)


def _v2_workload(c: Client) -> int:
    """Adds (10 acknowledged, 1 refused), reads from memory (5), a miss (ENOENTRY), a fencing read, and a
    read from disk (ledger 4, written before the restart). Returns the bytes read from memory."""
    assert [v2_add(c, 1, e) for e in range(10)] == [0] * 10
    assert v2_add(c, 1, 10, key=WRONG) == 102                          # EUA: refused
    cached = [v2_read(c, 1, e) for e in range(5)]
    assert [r.rc for r in cached] == [0] * 5
    assert v2_read(c, 1, 999).rc == 2                                  # ENOENTRY, read on the pool
    assert v2_read(c, 1, 9, FLAG_DO_FENCING, KEY).rc == 0              # fence, then read on the pool
    assert v2_read(c, 4, 0).rc == 0                                    # from the entry log, on the pool
    return sum(len(r.data) for r in cached)


def _v3_workload(c: Client) -> int:
    """Adds (12 acknowledged, 1 refused), reads (1 cached, 1 miss), a fencing read, three long polls (one
    timed out, one answered at once, one piggyback after an explicit LAC whose next entry is not here),
    WRITE_LAC, READ_LAC (ok, ENOENTRY), FORCE_LEDGER, GET_BOOKIE_INFO, GET_LIST_OF_ENTRIES_OF_LEDGER (ok,
    ENOLEDGER). Returns the bytes read from memory."""
    assert [v3_add(c, 2, e) for e in range(10)] == [pb.EOK] * 10
    assert v3_add(c, 2, 10, key=WRONG) == pb.EUA
    hit = v3_read(c, ledgerId=2, entryId=3)
    assert hit.status == pb.EOK
    assert v3_read(c, ledgerId=2, entryId=999).status == pb.ENOENTRY
    assert v3_read(c, ledgerId=2, entryId=9, flag=pb.ReadRequest.FENCE_LEDGER, masterKey=KEY).status == pb.EOK
    assert [v3_add(c, 3, e) for e in range(2)] == [pb.EOK] * 2         # ledger 3's LAC: 0
    assert v3_read(c, ledgerId=3, entryId=2, previousLAC=0, timeOut=200).status == pb.ENOENTRY
    now = v3_read(c, ledgerId=3, entryId=1, previousLAC=-1, timeOut=10000)
    assert now.status == pb.EOK
    lac = encode_lac(3, 5, CRC)
    assert c.v3(pb.WRITE_LAC, writeLacRequest=dict(ledgerId=3, lac=5, masterKey=KEY, body=lac)).status == pb.EOK
    assert v3_read(c, ledgerId=3, entryId=-1, previousLAC=3,
                   flag=pb.ReadRequest.ENTRY_PIGGYBACK).status == pb.ENOENTRY   # entry 4 is not here
    assert c.v3(pb.READ_LAC, readLacRequest=dict(ledgerId=3)).status == pb.EOK
    assert c.v3(pb.READ_LAC, readLacRequest=dict(ledgerId=404)).status == pb.ENOENTRY
    assert c.v3(pb.FORCE_LEDGER, forceLedgerRequest=dict(ledgerId=2)).status == pb.EOK
    assert c.v3(pb.GET_BOOKIE_INFO, getBookieInfoRequest=dict(requested=3)).status == pb.EOK
    assert c.v3(pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
                getListOfEntriesOfLedgerRequest=dict(ledgerId=2)).status == pb.EOK
    assert c.v3(pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
                getListOfEntriesOfLedgerRequest=dict(ledgerId=404)).status == pb.ENOLEDGER
    return len(hit.readResponse.body) + len(now.readResponse.body)


@pytest.fixture(scope="module")
def after_workload(stats_bookie):
    with stats_bookie.connect() as v2, stats_bookie.connect() as v3:
        memory_bytes = _v2_workload(v2) + _v3_workload(v3)
        s = scrape(stats_bookie)
    return s, memory_bytes


def test_every_java_server_series_is_served_with_its_kind_and_label_keys(after_workload):
    s, _ = after_workload
    checked = 0
    for kind, name, labels in java_series("bookkeeper_server_"):
        assert s.kinds.get(name) == kind, f"{name}: {s.kinds.get(name)} served, Java's is a {kind}"
        served = s.label_sets(name)
        keys = set(labels)
        assert any(set(ls) - {"success"} == keys for ls in served), f"{name}{labels}: served {served}"
        if NO_SUCH_PART in labels.values() or NO_SUCH_PART in labels.get("thread", ""):
            continue
        pool_thread = re.search(r"BookieReadThreadPool-OrderedExecutor-(\d+)-0", labels.get("thread", ""))
        if pool_thread and int(pool_thread.group(1)) >= READ_THREADS:
            continue                            # Java's vector has 8 read threads, this bookie 2
        if labels.get("threadPool") == "BookieReadThreadPool" and int(labels["thread"]) >= READ_THREADS:
            continue
        assert any({k: v for k, v in ls.items() if k != "success"} == labels for ls in served), \
            f"{name}{labels} not served: {served}"
        checked += 1
    assert checked >= 50
    # summaries are written as Java writes them: quantiles in ms for both outcomes, _count and _sum
    for q in ("0.5", "0.75", "0.95", "0.99", "0.999", "0.9999", "1.0"):
        assert ("bookkeeper_server_ADD_ENTRY_REQUEST", frozenset({("success", "true"), ("quantile", q)})) \
            in s.samples


def test_add_stats_count_what_was_acknowledged_and_refused(after_workload):
    s, _ = after_workload
    acked, refused, v2_processed = 10 + 10 + 2, 2, 10 + 1
    assert s.ok("bookkeeper_server_ADD_ENTRY_REQUEST") == acked
    assert s.fail("bookkeeper_server_ADD_ENTRY_REQUEST") == refused
    assert s.ok("bookkeeper_server_ADD_ENTRY", **FORCE0) == acked               # made durable by the journal
    assert s.fail("bookkeeper_server_ADD_ENTRY", **WRITE0) == refused            # refused on the reactor
    assert s.ok("bookkeeper_server_WRITE_THREAD_QUEUED_LATENCY", **WRITE0) == v2_processed   # v2 only, as Java
    thread = "BookieWriteThreadPool-OrderedExecutor-0-0"
    assert s.value("bookkeeper_server_thread_executor_completed", thread=thread) == acked + refused
    assert s.value("bookkeeper_server_ADD_ENTRY_REJECTED") == 0
    assert s.value("bookkeeper_server_ADD_ENTRY_IN_PROGRESS") == 0
    assert s.value("bookkeeper_server_ADD_ENTRY_BLOCKED") == 0
    assert s.value("bookkeeper_server_ADD_ENTRY_REQUEST_sum", success="true") > 0


def test_read_stats_by_kind_of_read(after_workload):
    s, memory_bytes = after_workload
    assert s.ok("bookkeeper_server_READ_ENTRY_REQUEST") == 8          # 5 + 1 memory, fence v2, disk
    assert s.fail("bookkeeper_server_READ_ENTRY_REQUEST") == 2        # the two misses (ENOENTRY)
    assert s.ok("bookkeeper_server_READ_ENTRY", **WRITE0) == 6        # answered from memory on the reactor
    pool = [{"thread": str(i), "threadPool": "BookieReadThreadPool"} for i in range(READ_THREADS)]
    assert sum(s.ok("bookkeeper_server_READ_ENTRY", **p) for p in pool) == 2     # fence v2 + disk read
    assert sum(s.fail("bookkeeper_server_READ_ENTRY", **p) for p in pool) == 2
    assert s.ok("bookkeeper_server_READ_ENTRY_SCHEDULING_DELAY") == 10 + 1 + 3
    for name in ("READ_ENTRY_FENCE_REQUEST", "READ_ENTRY_FENCE_READ", "READ_ENTRY_FENCE_WAIT"):
        assert (s.ok("bookkeeper_server_" + name), s.fail("bookkeeper_server_" + name)) == (1, 0), name
    assert (s.ok("bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST"),
            s.fail("bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST")) == (1, 2)
    assert s.ok("bookkeeper_server_READ_ENTRY_LONG_POLL_PRE_WAIT") == 1
    assert s.fail("bookkeeper_server_READ_ENTRY_LONG_POLL_WAIT") == 1            # timed out
    assert (s.ok("bookkeeper_server_READ_ENTRY_LONG_POLL_READ"),
            s.fail("bookkeeper_server_READ_ENTRY_LONG_POLL_READ")) == (1, 2)
    assert s.value("bookkeeper_server_READ_LAST_ENTRY_NOENTRY_ERROR") == 1
    # v2 miss + fence + disk, v3 miss, 2 long-poll reads, 2 READ_LAC, 2 GET_LIST_OF_ENTRIES_OF_LEDGER (an index
    # scan: on the read pool, as Java's readThreadPool runs it)
    pool_jobs = 2 + 2 + 2 + 2 + 2
    completed = sum(s.value("bookkeeper_server_thread_executor_completed",
                            thread=f"BookieReadThreadPool-OrderedExecutor-{i}-0") for i in range(READ_THREADS))
    assert completed == pool_jobs
    assert s.value("bookkeeper_server_READ_ENTRY_IN_PROGRESS") == 0
    assert s.value("bookkeeper_server_READ_ENTRY_REJECTED") == 0
    # reads answered from memory are the Bookie's reads too (BOOKIE_READ_ENTRY, sizes, READ_BYTES)
    assert s.ok("bookie_BOOKIE_READ_ENTRY_BYTES") >= 8     # 6 + the v3 fencing read + the long poll at once
    assert s.value("bookie_READ_BYTES") >= memory_bytes


def test_other_operations_and_executor_gauges(after_workload):
    s, _ = after_workload
    for name, ok, fail in (("READ_LAC", 1, 1), ("WRITE_LAC", 1, 0), ("FORCE_LEDGER", 1, 0),
                           ("GET_BOOKIE_INFO", 1, 0), ("GET_LIST_OF_ENTRIES_OF_LEDGER", 1, 1)):
        for stat in (name, name + "_REQUEST"):
            assert (s.ok("bookkeeper_server_" + stat), s.fail("bookkeeper_server_" + stat)) == (ok, fail), stat
    assert s.value("bookkeeper_server_BookieWriteThreadPool_threads") == 1
    assert s.value("bookkeeper_server_BookieWriteThreadPool_max_queue_size") == 10000
    assert s.value("bookkeeper_server_BookieReadThreadPool_threads") == READ_THREADS
    assert s.value("bookkeeper_server_BookieReadThreadPool_max_queue_size") == 10000
    assert s.value("bookkeeper_server_BookieHighPriorityThread_threads") == 0
    assert (s.ok("bookkeeper_server_CHANNEL_WRITE"), s.fail("bookkeeper_server_CHANNEL_WRITE")) == (0, 0)


# --- the read fast path's sizes (Cython, and the pure-Python twin) -----------------------------------------
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_read_fast_path_records_each_hit_size_and_the_bytes(impl):
    store = {(3, 0): b"a" * 10, (3, 1): b"b" * 30}
    v2 = [impl.encode_read_request(3, e)[4:] for e in (0, 5, 1)]
    sizes, total = OpStats(), Counter()
    end, misses = impl.serve_v2_reads(v2, 0, impl.FrameBuilder(), lambda led, e, s: store.get((led, e)), {},
                                      -1, -1, sizes, total)
    assert (end, misses) == (3, [(3, 5, 2), (3, 1, 2)])     # entry 1 queues behind the miss of entry 5
    assert sizes.count(True) == 1 and sizes.total(True) == 10 and total.value == 10
    request = pb.Request()
    request.header.version, request.header.operation, request.header.txnId = pb.VERSION_THREE, pb.READ_ENTRY, 1
    request.readRequest.ledgerId, request.readRequest.entryId = 3, 1
    v3 = [request.SerializeToString()] * 2
    end, misses = impl.serve_v3_reads(v3, 0, impl.FrameBuilder(), lambda led, e, s: store.get((led, e)),
                                      lambda s, led: 1, {}, -1, -1, sizes, total)
    assert end == 2 and not misses
    assert sizes.count(True) == 3 and sizes.total(True) == 70 and total.value == 70
    # without stats (the default), nothing is recorded and nothing else changes
    end, _ = impl.serve_v3_reads(v3, 0, impl.FrameBuilder(), lambda led, e, s: store.get((led, e)),
                                 lambda s, led: 1, {})
    assert end == 2 and total.value == 70


# --- in-process: backpressure ---------------------------------------------------------------------------
class _FakeBookie(HeldAddsBookie):
    """A bookie whose adds wait until complete(); records into a live registry."""

    def __init__(self, registry: StatsRegistry):
        super().__init__(registry.logger())


def _stat(registry: StatsRegistry, name: str, **labels):
    return registry.family("bookkeeper_server_" + name).series[tuple(labels.items())]


def _connected(bookie, conf: ServerConfiguration, clock: task.Clock):
    """A server factory over `bookie` on a fake clock, and one connection to it: (factory, protocol,
    transport)."""
    factory = BookieServerFactory(bookie, ServerSettings.from_conf(conf), reactor=clock)
    proto = factory.buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return factory, proto, transport


def test_rejections_blocked_connections_and_channel_write_in_process():
    registry = StatsRegistry()
    clock = task.Clock()
    conf = ServerConfiguration({"maxPendingAddRequestsPerThread": 2, "waitTimeoutOnResponseBackpressureMs": 1000,
                                "numReadWorkerThreads": 0})
    bookie = _FakeBookie(registry)
    factory, proto, _ = _connected(bookie, conf, clock)
    proto.dataReceived(b"".join(encode_add_request(KEY, 1, e, e - 1, e + 1, b"x", CRC) for e in range(3)))
    assert _stat(registry, "ADD_ENTRY_IN_PROGRESS")() == 2
    bookie.complete()
    add_request = _stat(registry, "ADD_ENTRY_REQUEST")
    assert (add_request.count(True), add_request.count(False)) == (2, 1)
    assert _stat(registry, "ADD_ENTRY_REJECTED").value == 1
    assert _stat(registry, "thread_executor_tasks_rejected",
                 thread="BookieWriteThreadPool-OrderedExecutor-0-0")() == 1
    assert _stat(registry, "BookieReadThreadPool_threads")() == 0
    # a connection held for room (write cache full): ADD_ENTRY_BLOCKED while it waits, then the wait
    proto.block("room")
    assert _stat(registry, "ADD_ENTRY_BLOCKED")() == 1
    proto.unblock("room")
    assert _stat(registry, "ADD_ENTRY_BLOCKED")() == 0
    assert _stat(registry, "ADD_ENTRY_BLOCKED_WAIT").count(True) == 1
    # a peer that stops reading: CHANNEL_WRITE ok once it reads again, failed when it is dropped for it
    proto.pauseProducing()
    proto.resumeProducing()
    proto.pauseProducing()
    clock.advance(1.5)
    channel_write = _stat(registry, "CHANNEL_WRITE")
    assert (channel_write.count(True), channel_write.count(False)) == (1, 1)


class _BusyBatchBookie(_FakeBookie):
    """A batch bookie with room for one add: the rest of a batch is StorageBusyError until room comes."""

    def __init__(self, registry: StatsRegistry):
        super().__init__(registry)
        self.room = 1

    def add_entries(self, adds, callback):
        taken = min(self.room, len(adds))
        self.room -= taken
        self.pending.append(lambda error: callback([*range(taken)] if taken < len(adds) else None, error))
        return [(i, StorageBusyError("write cache full")) for i in range(taken, len(adds))]


def _answered_entries(transport: StringTransport) -> list[tuple[int, int]]:
    data, out = transport.value(), []
    while data:
        size = int.from_bytes(data[:4], "big")
        r = decode_response(data[4:4 + size])
        out.append((r.entry_id, r.rc))
        data = data[4 + size:]
    return out


def test_an_add_cut_by_the_pending_limit_is_answered_once_even_when_the_rest_waits_for_room():
    registry = StatsRegistry()
    clock = task.Clock()
    conf = ServerConfiguration({"maxPendingAddRequestsPerThread": 2, "numReadWorkerThreads": 0,
                                "dbStorage_maxThrottleTimeMs": 100})
    bookie = _BusyBatchBookie(registry)
    factory, proto, transport = _connected(bookie, conf, clock)
    proto.dataReceived(b"".join(encode_add_request(KEY, 1, e, e - 1, e + 1, b"x", CRC) for e in range(4)))
    bookie.complete()
    clock.advance(0.2)                    # the throttle deadline: whatever still waits for room is refused
    bookie.room = 10
    factory.room_available()
    clock.advance(1)
    bookie.complete()
    answers = _answered_entries(transport)
    assert sorted(e for e, _ in answers) == [0, 1, 2, 3], answers       # each add answered exactly once
    assert dict(answers)[0] == 0
