"""`bkfast bench bookie`: BookKeeper's BenchBookie (and more) against any bookie, bkfast's or Java's.

Owns: the command line. Talks v2 (default) or v3 (`--protocol v3`) straight to one bookie given by
`--bookie host:port`; needs no ZooKeeper (ledger ids from `--first-ledger-id`, by default a
time-based number so reruns do not collide with ledgers fenced or closed by earlier runs). Phases, in
order, each optional: warmup (not reported), latency (one add at a time), throughput (up to
`--outstanding` adds in flight), rate (open loop, `--rate` adds/s on a fixed schedule, latency from
the scheduled time). One line per phase, or with `--json` one JSON object with `latency`,
`throughput` and `rate` objects (each: adds, ok, errors, adds_per_s, mb_per_s, mean_ms, p50_ms,
p99_ms, p999_ms, max_ms). Exit status 1 if any add failed (non-EOK or unanswered), 2 if the bookie
could not be reached. The client machinery is in bkfast.loadgen.

Must never: write anything except adds to the ledgers it chose, or retry a failed add (every failure
is counted and reported).
"""

from __future__ import annotations

import json
import sys
import time

import click

from bkfast.digests import DigestType


def parse_bookie(value: str) -> tuple[str, int]:
    """"host:port" (or "[v6]:port") -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def default_first_ledger_id() -> int:
    """Milliseconds since the epoch x 1000: distinct for reruns (up to 1000 ledgers a run)."""
    return int(time.time() * 1000) * 1000


def format_phase(name: str, r: dict) -> str:
    def f(v):
        return "-" if v is None else f"{v:.3f}"
    line = (f"{name:<10} {r['adds']:>9,} adds {r['duration_s']:>8.2f} s {r['adds_per_s']:>11,.0f} adds/s "
            f"{r['mb_per_s']:>8.1f} MB/s  mean {f(r['mean_ms'])} p50 {f(r['p50_ms'])} "
            f"p99 {f(r['p99_ms'])} p99.9 {f(r['p999_ms'])} max {f(r['max_ms'])} ms  errors {r['errors']}")
    if r.get("target_adds_per_s"):
        line += f"  (target {r['target_adds_per_s']:,.0f} adds/s)"
    if r["errors"]:
        line += "  " + ", ".join(f"{k}: {v}" for k, v in r["error_codes"].items())
    return line


def tls_from_conf_file(path: str | None):
    """The client's TLS (bkfast.tls.context.ClientTLS) from a configuration file's tls* keys."""
    from bkfast.conf import ClientConfiguration
    from bkfast.errors import ConfigurationError
    from bkfast.tls.context import TLS_FACTORY_CLASS, ClientTLS

    if path is None:
        raise click.UsageError("--tls needs --tls-conf FILE (the client's tls* keys: trust store, key store)")
    try:
        conf = ClientConfiguration.load(path)
        if not conf.get("tlsProviderFactoryClass"):
            conf.set("tlsProviderFactoryClass", TLS_FACTORY_CLASS)
        return ClientTLS(conf)
    except (ConfigurationError, OSError) as err:
        raise click.UsageError(f"--tls-conf {path}: {err}") from None


def compare(plain: dict, tls: dict) -> dict:
    """TLS against plaintext: throughput ratio and latency differences (of the phases both ran)."""
    out = {}
    if "throughput" in plain and "throughput" in tls and plain["throughput"].get("adds_per_s"):
        out["throughput_ratio"] = round(tls["throughput"]["adds_per_s"] / plain["throughput"]["adds_per_s"], 3)
    if "latency" in plain and "latency" in tls:
        for p in ("p50_ms", "p99_ms"):
            if plain["latency"].get(p) is not None and tls["latency"].get(p) is not None:
                out[f"latency_{p}_delta"] = round(tls["latency"][p] - plain["latency"][p], 3)
    return out


def _digest(value: str) -> DigestType:
    try:
        return DigestType.parse(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


@click.command("bookie")
@click.option("--bookie", "bookie_addr", required=True, metavar="HOST:PORT", help="The bookie to write to.")
@click.option("--protocol", "protocol_version", type=click.Choice(["v2", "v3"]), default="v2",
              show_default=True, help="Wire protocol.")
@click.option("--size", default=1024, show_default=True, type=click.IntRange(0, 5 * 1024 * 1024 - 600),
              help="Payload bytes per add.")
@click.option("--ledgers", default=1, show_default=True, type=click.IntRange(1, 100000),
              help="Ledgers written round-robin.")
@click.option("--first-ledger-id", type=click.IntRange(0, 2**63 - 100001), default=None,
              help="Id of the first ledger (the others follow it). Default: time-based, unique per run.")
@click.option("--latency-count", default=10000, show_default=True, type=click.IntRange(0),
              help="Adds in the latency phase (one at a time); 0 skips it.")
@click.option("--throughput-count", default=100000, show_default=True, type=click.IntRange(0),
              help="Adds in the throughput phase; 0 skips it.")
@click.option("--outstanding", default=1000, show_default=True, type=click.IntRange(1),
              help="Adds in flight in the throughput phase (split across connections); caps the rate phase.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Also run an open-loop phase at this many adds/s (latency from the scheduled time).")
@click.option("--rate-count", type=click.IntRange(1), default=None,
              help="Adds in the rate phase. Default: --throughput-count, or 10 s worth if that is 0.")
@click.option("--warmup-count", default=0, show_default=True, type=click.IntRange(0),
              help="Adds before the latency phase, not reported.")
@click.option("--connections", default=1, show_default=True, type=click.IntRange(1, 1024),
              help="TCP connections to the bookie.")
@click.option("--digest-type", default="CRC32C", show_default=True, help="CRC32, CRC32C, MAC or DUMMY.")
@click.option("--password", default="", show_default=True, help="Ledger password (gives the master key).")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a phase may take before its unanswered adds count as failed.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of one line per phase.")
@click.option("--samples-out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write every successful add of the last measured phase as float64 pairs (start time on "
                   "the CLOCK_MONOTONIC clock, latency), seconds, native byte order (for merged percentiles "
                   "and lining tails up with bookie events).")
@click.option("--tls", "tls", is_flag=True,
              help="Run every phase twice, in plaintext and then over TLS (START_TLS), and compare.")
@click.option("--tls-conf", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Client configuration file with the tls* keys (e.g. the sandbox's tls/client.conf); "
                   "alone: run over TLS only.")
def bookie_bench(bookie_addr, protocol_version, size, ledgers, first_ledger_id, latency_count,
                 throughput_count, outstanding, rate, rate_count, warmup_count, connections, digest_type,
                 password, timeout_s, as_json, samples_out, tls, tls_conf) -> None:
    """Add entries to one bookie, v2 or v3, and report latency and throughput (like BenchBookie)."""
    try:
        host, port = parse_bookie(bookie_addr)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--bookie") from None
    dt = _digest(digest_type)
    if first_ledger_id is None:
        first_ledger_id = default_first_ledger_id()
    if rate and rate_count is None:
        rate_count = throughput_count or max(1, int(rate * 10))
    client_tls = tls_from_conf_file(tls_conf) if tls or tls_conf else None
    session = _BenchSession(host, port, as_json, bool(samples_out), dict(
        protocol_version=protocol_version, size=size, ledgers=ledgers, digest_type=int(dt),
        password=password.encode("utf-8"), connections=connections, outstanding=outstanding,
        warmup_count=warmup_count, latency_count=latency_count, throughput_count=throughput_count, rate=rate,
        rate_count=rate_count or 0, timeout_s=timeout_s))
    if tls:
        results = session.wait(session.start_compared(first_ledger_id, ledgers, client_tls))
    else:
        results = session.wait(session.start(first_ledger_id, client_tls))
    if samples_out:
        session.write_samples(samples_out)
    doc = {"bookie": f"{host}:{port}", "protocol": protocol_version, "size": size, "ledgers": ledgers,
           "first_ledger_id": first_ledger_id, "connections": connections, "outstanding": outstanding,
           "digest_type": dt.name}
    _report(results, doc, tls, as_json)


class _BenchSession:
    """The runs of one `bkfast bench bookie` on the reactor (plaintext, then TLS when comparing): the
    phase lines they print, the samples of the last measured phase and how they ended."""

    def __init__(self, host: str, port: int, as_json: bool, keep_samples: bool, bench_kwargs: dict):
        self.host, self.port = host, port
        self.as_json = as_json
        self.keep_samples = keep_samples
        self.bench_kwargs = bench_kwargs      # loadgen.run_bench's options, the same for every run
        self.label = ""
        self.samples = None
        self.outcome: dict = {}

    def on_phase(self, name, res) -> None:
        if not self.as_json:
            click.echo(self.label + format_phase(name, res))

    def on_samples(self, name, samples) -> None:
        self.samples = samples

    def start(self, first_id: int, with_tls):
        from twisted.internet import reactor

        from bkfast import loadgen

        return loadgen.run_bench(reactor, self.host, self.port, first_ledger_id=first_id, on_phase=self.on_phase,
                                 on_samples=self.on_samples if self.keep_samples else None, tls=with_tls,
                                 **self.bench_kwargs)

    def start_compared(self, first_id: int, ledgers: int, client_tls):
        """The plaintext run, then the TLS one on the next `ledgers` ledger ids: fires with both and
        their comparison."""
        self.label = "plaintext "
        return self.start(first_id, None).addCallback(self._start_tls, first_id + ledgers, client_tls)

    def _start_tls(self, plain: dict, first_id: int, client_tls):
        self.label = "tls "
        return self.start(first_id, client_tls).addCallback(
            lambda tls: {"plaintext": plain, "tls": tls, "tls_vs_plaintext": compare(plain, tls)})

    def wait(self, d) -> dict:
        """Runs the reactor until `d` fires: its results, or exit 2 (the bookie failed us) or 130 (the
        reactor stopped early, Ctrl-C)."""
        from twisted.internet import reactor

        d.addCallbacks(self._ok, self._failed)
        d.addBoth(lambda _: reactor.callWhenRunning(reactor.stop))
        if not d.called:
            reactor.run()
        if "error" in self.outcome:
            click.echo(f"error: cannot run against {self.host}:{self.port}: {self.outcome['error']}", err=True)
            sys.exit(2)
        if "results" not in self.outcome:
            click.echo("interrupted", err=True)
            sys.exit(130)
        return self.outcome["results"]

    def _ok(self, results) -> None:
        self.outcome["results"] = results

    def _failed(self, f) -> None:
        from twisted.internet.defer import FirstError

        if f.check(FirstError):
            f = f.value.subFailure
        self.outcome["error"] = f.getErrorMessage()

    def write_samples(self, path: str) -> None:
        with open(path, "wb") as f:
            if self.samples is not None:
                self.samples.tofile(f)


def _report(results: dict, doc: dict, tls: bool, as_json: bool) -> None:
    """Prints the comparison (text) or one JSON object (`doc` + the results); exit 1 if any add failed."""
    runs = [results["plaintext"], results["tls"]] if tls else [results]
    errors = sum(r["errors"] for one in runs for r in one.values())
    if tls and not as_json:
        for key, value in results["tls_vs_plaintext"].items():
            click.echo(f"tls vs plaintext: {key} {value}")
    if as_json:
        click.echo(json.dumps({**doc, "errors": errors, **results}, sort_keys=True))
    if errors:
        if not as_json:
            click.echo(f"{errors} add(s) failed", err=True)
        sys.exit(1)
