"""`bkfast bench ledger`: BookKeeper's BenchThroughputLatency for the bkfast client.

One client process writes one ledger (E/WQ/AQ as given) for `--duration` seconds, either closed loop
(up to `--outstanding` adds in flight) or open loop (`--rate N` adds/s on a fixed schedule, latency
measured from each add's scheduled time so queueing is not hidden). Then, unless disabled, it reads
the ledger back sequentially (entries/s) and measures tailing-read latency: the time from issuing an
add until a second handle, long-polling the LAC, has read the entry.
Prints one line per phase; `--json` prints one object (write results at the top level:
adds_per_s, p50_ms, p95_ms, p99_ms, p999_ms; `read` and `tailing` objects).
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from bkfast.loadgen import percentiles_ms

_SAMPLE_LIMIT = 2_000_000


def _latency_summary(latencies: list[float]) -> dict:
    lat = sorted(latencies)
    return {**percentiles_ms(lat), "mean_ms": round(sum(lat) / len(lat) * 1000.0, 3) if lat else None}


async def _write_phase(reactor, lh, size: int, outstanding: int, duration: float, rate: int | None) -> dict:
    from twisted.internet import task

    phase = _WritePhase(lh, os.urandom(size), outstanding, duration, rate)
    cpu_started = time.process_time()
    if rate is None:
        phase.pump()
        ticker = task.LoopingCall(phase.maybe_done)
    else:
        ticker = task.LoopingCall(phase.tick)
    ticker.clock = reactor
    ticker.start(0.001 if rate else 0.05)
    await phase.done
    ticker.stop()
    return phase.result(time.perf_counter() - phase.started, time.process_time() - cpu_started)


class _WritePhase:
    """The adds of one write phase: closed loop (`outstanding` in flight, each completion sends the next)
    or open loop at `rate` adds/s; their counts, the first error and the latencies."""

    def __init__(self, lh, payload: bytes, outstanding: int, duration: float, rate: int | None):
        from twisted.internet import defer

        self.add = lh.async_add_entry       # Java's asyncAddEntry with a callback, as BenchThroughputLatency uses
        self.payload = payload
        self.outstanding = outstanding
        self.rate = rate
        self.latencies: list[float] = []
        self.in_flight = self.ok = self.errors = self.issued = 0
        self.error: str | None = None
        self.done: defer.Deferred[None] = defer.Deferred()
        self.started = time.perf_counter()
        self.deadline = self.started + duration

    def completed(self, error, _entry_id, t0) -> None:
        self.in_flight -= 1
        if error is None:
            self.ok += 1
            if len(self.latencies) < _SAMPLE_LIMIT:
                self.latencies.append(time.perf_counter() - t0)
            if self.rate is None:
                self.pump()
        else:
            self.errors += 1
            self.error = self.error or f"{type(error).__name__}: {error}"
        self.maybe_done()

    def issue(self, t0: float) -> None:
        self.in_flight += 1
        self.issued += 1
        self.add(self.payload, self.completed, t0)

    def pump(self) -> None:
        now = time.perf_counter()
        if now >= self.deadline or self.error:
            return
        while self.in_flight < self.outstanding:
            self.issue(now)

    def tick(self) -> None:
        """Open loop: issues the adds due by now, each timed from its scheduled time, not from now."""
        now = time.perf_counter()
        if now >= self.deadline or self.error:
            self.maybe_done()
            return
        assert self.rate is not None, "tick() runs only with a rate"
        interval = 1.0 / self.rate
        due = int((now - self.started) / interval) + 1
        while self.issued < due and self.in_flight < self.outstanding:
            self.issue(self.started + self.issued * interval)

    def maybe_done(self) -> None:
        if (self.in_flight == 0 and (time.perf_counter() >= self.deadline or self.error)
                and not self.done.called):
            self.done.callback(None)

    def result(self, elapsed: float, cpu: float) -> dict:
        ok, size = self.ok, len(self.payload)
        result: dict[str, object] = {"adds": ok, "errors": self.errors, "duration_s": round(elapsed, 3),
                  "client_cpu_us_per_add": round(cpu / ok * 1e6, 2) if ok else None,
                  "adds_per_s": round(ok / elapsed, 1), "mb_per_s": round(ok * size / elapsed / 1e6, 2)}
        if self.error:
            result["first_error"] = self.error
        result.update(_latency_summary(self.latencies))
        return result


async def _read_phase(bk, ledger_id: int, password: bytes, last: int, batch: int = 10000) -> dict:
    rh = await bk.open_ledger(ledger_id, password, recovery=False)
    started = time.perf_counter()
    count = 0
    first = 0
    while first <= last:
        end = min(last, first + batch - 1)
        entries = await rh.read_unconfirmed_entries(first, end)
        count += len(entries)
        first = end + 1
    elapsed = time.perf_counter() - started
    return {"entries": count, "duration_s": round(elapsed, 3), "entries_per_s": round(count / elapsed, 1)
            if elapsed > 0 else None}


async def _tailing_phase(reactor, bk, size: int, count: int, ensemble, wq, aq, protocol_digest, password) -> dict:
    from twisted.internet import task

    lh = await bk.create_ledger(ensemble, wq, aq, digest_type=protocol_digest, password=password)
    rh = await bk.open_ledger(lh.ledger_id, password, recovery=False)
    payload = os.urandom(size)
    sent: dict[int, float] = {}
    latencies: list[float] = []

    async def writer():
        for _ in range(count):
            t0 = time.perf_counter()
            d = lh.add_entry(payload)
            sent[len(sent)] = t0
            await d
            await task.deferLater(reactor, 0.002, lambda: None)
        await lh.close()        # confirms the last entry to the reader (through the metadata)

    writing = writer()
    from twisted.internet import defer

    write_done = defer.Deferred.fromCoroutine(writing)
    next_entry = 0
    while next_entry < count:
        lac = await rh.read_lac_long_poll(next_entry - 1, 1000)
        if lac < next_entry:
            # The last entry is only confirmed by the close (the bookies never see a later LAC).
            await rh.refresh_metadata()
            lac = rh.last_add_confirmed
        if lac >= next_entry:
            entries = await rh.read_entries(next_entry, lac)
            now = time.perf_counter()
            for entry in entries:
                latencies.append(now - sent[entry.entry_id])
            next_entry = lac + 1
    await write_done
    result = {"entries": len(latencies)}
    result.update(_latency_summary(latencies))
    return result


async def run_ledger_bench(reactor, metadata_uri: str, ensemble: int, write_quorum: int, ack_quorum: int,
                           size: int, outstanding: int, duration: float, rate: int | None, protocol: str,
                           digest: str, read: bool, tailing: int, throttle: int = 0,
                           client_conf: dict | None = None) -> dict:
    from bkfast.client import AsyncBookKeeper

    password = b"bench"
    bk = await AsyncBookKeeper.connect(metadata_uri, reactor, protocol=protocol, throttle=throttle,
                                       **(client_conf or {}))
    try:
        lh = await bk.create_ledger(ensemble, write_quorum, ack_quorum, digest_type=digest, password=password)
        result = await _write_phase(reactor, lh, size, outstanding, duration, rate)
        result.update({"ledger_id": lh.ledger_id, "ensemble": ensemble, "write_quorum": write_quorum,
                       "ack_quorum": ack_quorum, "size": size, "protocol": protocol, "rate": rate,
                       "outstanding": outstanding, "throttle": throttle})
        last = lh.last_add_confirmed
        await lh.close()
        if read and last >= 0:
            result["read"] = await _read_phase(bk, lh.ledger_id, password, last)
        if tailing > 0:
            result["tailing"] = await _tailing_phase(reactor, bk, size, tailing, ensemble, write_quorum, ack_quorum,
                                                     digest, password)
        return result
    finally:
        await bk.close()


@click.command("ledger")
@click.option("--metadata-uri", required=True, help="zk+hierarchical://host:port/ledgers or embedded:///dir "
              "(embedded only works in-process; use a ZooKeeper sandbox for separate processes).")
@click.option("--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--size", default=1024, show_default=True, type=click.IntRange(0), help="Entry payload, bytes.")
@click.option("--outstanding", default=10000, show_default=True, type=click.IntRange(1),
              help="Adds in flight at most.")
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1), help="Write phase, s.")
@click.option("--rate", default=None, type=click.IntRange(1), help="Open loop: this many adds/s.")
@click.option("--protocol", type=click.Choice(["v2", "v3"]), default="v2", show_default=True)
@click.option("--digest", default="CRC32C", show_default=True)
@click.option("--read/--no-read", default=True, show_default=True, help="Sequential read phase afterwards.")
@click.option("--tailing", default=2000, show_default=True, type=click.IntRange(0),
              help="Entries for the tailing-read latency phase (0 = skip).")
@click.option("--gc-tuning/--no-gc-tuning", default=True, show_default=True,
              help="gc.freeze() after start-up and gen-0 threshold 50,000, so the collector does not re-scan "
                   "the adds in flight (measured: 5.3 -> 5.1 us of client CPU per add; 31 -> 20 us before the "
                   "Cython add path).")
@click.option("--throttle", default=0, show_default=True, type=click.IntRange(0),
              help="The client's `throttle` (adds/s per ledger handle; 0 = none). BookKeeper's default is 5,000; "
                   "its benchmarks, like this one, run without it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--tls", "tls", is_flag=True,
              help="Run the whole bench twice, in plaintext and then over TLS, and compare (`plaintext`, `tls` "
                   "and `tls_vs_plaintext` in --json).")
@click.option("--tls-conf", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Client configuration file with the tls* keys (e.g. the sandbox's tls/client.conf); "
                   "alone: run over TLS only.")
def ledger(metadata_uri, ensemble, write_quorum, ack_quorum, size, outstanding, duration, rate, protocol, digest,
           read, tailing, gc_tuning, throttle, as_json, tls, tls_conf) -> None:
    """Write throughput/latency, sequential read and tailing latency of one ledger through the client."""
    import gc

    from twisted.internet import defer, reactor

    sys.setswitchinterval(0.0005)
    if gc_tuning:
        gc.freeze()
        gc.set_threshold(50000, 50, 100)
    outcome: dict = {}
    tls_keys = None
    if tls or tls_conf:
        if tls_conf is None:
            raise click.UsageError("--tls needs --tls-conf FILE (the client's tls* keys)")
        from bkfast.conf import parse_properties

        with open(tls_conf, encoding="utf-8") as f:
            tls_keys = {name: value for _, name, value in parse_properties(f.read())}
        tls_keys.setdefault("tlsProviderFactoryClass", "org.apache.bookkeeper.tls.TLSContextFactory")

    async def one(conf):
        return await run_ledger_bench(reactor, metadata_uri, ensemble, write_quorum, ack_quorum, size, outstanding,
                                      duration, rate, protocol, digest, read, tailing, throttle, conf)

    async def main():
        try:
            if tls:
                plain = await one(None)
                secure = await one(tls_keys)
                outcome["result"] = {"plaintext": plain, "tls": secure, "tls_vs_plaintext": {
                    "throughput_ratio": round(secure["adds_per_s"] / plain["adds_per_s"], 3)
                    if plain["adds_per_s"] else None,
                    "p99_ms_delta": round(secure["p99_ms"] - plain["p99_ms"], 3)
                    if secure["p99_ms"] is not None and plain["p99_ms"] is not None else None}}
            else:
                outcome["result"] = await one(tls_keys)
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            reactor.callLater(0, reactor.stop)

    reactor.callWhenRunning(lambda: defer.Deferred.fromCoroutine(main()))
    reactor.run()
    if "error" in outcome:
        raise click.ClickException(outcome["error"])
    r = outcome["result"]
    r["gc_tuning"] = gc_tuning
    if as_json:
        click.echo(json.dumps(r, sort_keys=True))
        return
    if tls:
        for name in ("plaintext", "tls"):
            click.echo(f"[{name}]")
            _print(r[name], size, ensemble, write_quorum, ack_quorum, protocol, rate, outstanding)
        for key, value in r["tls_vs_plaintext"].items():
            click.echo(f"tls vs plaintext: {key} {value}")
        return
    _print(r, size, ensemble, write_quorum, ack_quorum, protocol, rate, outstanding)


def _print(r, size, ensemble, write_quorum, ack_quorum, protocol, rate, outstanding) -> None:
    mode = f"open loop {rate}/s" if rate else f"<= {outstanding} outstanding"
    click.echo(f"write: {r['adds']} adds of {size} B, E={ensemble} WQ={write_quorum} AQ={ack_quorum} {protocol}, "
               f"{mode}: {r['adds_per_s']:,.0f} adds/s {r['mb_per_s']} MB/s, p50 {r['p50_ms']} ms p95 {r['p95_ms']} "
               f"ms p99 {r['p99_ms']} ms p99.9 {r['p999_ms']} ms, errors {r['errors']}, "
               f"client CPU {r['client_cpu_us_per_add']} us/add")
    if "read" in r:
        click.echo(f"read: {r['read']['entries']} entries sequentially: {r['read']['entries_per_s']:,.0f} entries/s")
    if "tailing" in r:
        t = r["tailing"]
        click.echo(f"tailing: {t['entries']} entries write->visible p50 {t['p50_ms']} ms p99 {t['p99_ms']} ms "
                   f"p99.9 {t['p999_ms']} ms")
