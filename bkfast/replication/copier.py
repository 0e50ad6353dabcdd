"""Copying one segment's replicas to replacement bookies, and the CAS that puts them in the metadata (spec §7.6).

Owns: the byte-rate limiter of `replicationRateByBytes`, `copy_segment` (read every entry of the segment that
a replaced bookie was in the write set of, from the surviving replicas of its write set, verify its digest,
and send the stored bytes unchanged to the replacement as a recovery add with the ledger's master key) and
`swap_bookies` (replace old -> new in the segment starting at a given entry, re-reading on a version
conflict, only while an old bookie is still there). Only the striped entries are copied (readers and checks
never look for the others; spec §7.6). The stored bytes are forwarded as they are, so every replica of an
entry stays byte-identical. Everything runs in the reactor thread (async functions).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from twisted.internet import defer, task

from bkfast._stats import now_ns
from bkfast.client.distribution import write_set
from bkfast.client.entries import DigestContext
from bkfast.errors import BKDigestMatchException, BKError, BKMetadataVersionException
from bkfast.ids import LedgerId
from bkfast.meta.driver import Versioned
from bkfast.meta.ledger_metadata import LedgerMetadata

__all__ = ["ByteRateLimiter", "CopyStats", "copy_segment", "swap_bookies", "segment_ranges"]

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 64


class ByteRateLimiter:
    """At most `rate` bytes per second (a token bucket holding up to one second); rate <= 0 = unlimited.
    `acquire(n)` is a Deferred that fires when `n` bytes may go."""

    def __init__(self, rate: float, reactor):
        self.rate = float(rate)
        self.reactor = reactor
        self.tokens = 0.0                 # as Guava's RateLimiter: no stored permits at the start
        self.updated = time.monotonic()

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def charge(self, n: int) -> None:
        """Count `n` more bytes (or give back -n) without waiting: the next acquire pays for them."""
        if not self.unlimited:
            self.tokens -= n

    def acquire(self, n: int) -> defer.Deferred:
        if self.unlimited:
            return defer.succeed(None)
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        self.tokens -= n                  # may go negative: the debt is paid by waiting
        if self.tokens >= 0:
            return defer.succeed(None)
        return task.deferLater(self.reactor, -self.tokens / self.rate, lambda: None)


@dataclass
class CopyStats:
    """What one copy did: entries and bytes written, and entries no surviving replica could give."""

    entries: int = 0
    bytes: int = 0
    lost: list[int] = field(default_factory=list)

    def add(self, other: CopyStats) -> None:
        self.entries += other.entries
        self.bytes += other.bytes
        self.lost.extend(other.lost)


def segment_ranges(md: LedgerMetadata, last_entry: int) -> list[tuple[int, int, tuple[str, ...]]]:
    """(first, last, ensemble) of every segment; the last one ends at `last_entry` (last < first: empty)."""
    out = []
    for i, (first, ensemble) in enumerate(md.ensembles):
        last = md.ensembles[i + 1][0] - 1 if i + 1 < len(md.ensembles) else last_entry
        out.append((first, last, ensemble))
    return out


async def _read_verified(bk, ledger: LedgerId, entry_id: int, sources: list[str], digest: DigestContext):
    """(The stored bytes of `entry_id`, its payload's length) from the first source that has a valid copy,
    or None."""
    errors: list[BKError] = []
    for bookie in sources:
        try:
            data = await bk.bookie_client.read_entry(bookie, ledger.ledger_id, entry_id, scope_id=ledger.scope_id)
            entry = digest.decode(data, entry_id)
            return bytes(data), len(entry.payload)
        except BKDigestMatchException as err:
            log.warning("ledger %d entry %d: the copy on %s fails verification: %s", ledger.ledger_id, entry_id,
                        bookie, err)
            errors.append(err)
        except BKError as err:
            errors.append(err)
    log.debug("ledger %d entry %d: no readable replica among %s: %s", ledger.ledger_id, entry_id, sources, errors)
    return None


async def _read_recorded(bk, ledger: LedgerId, entry_id: int, sources: list[str], digest: DigestContext, recorder):
    """(stored bytes, payload length) of `entry_id`, or (None, 0) if no source has a valid copy; recorded in
    the ReplicatorStats `recorder` if given (Java's READ_DATA_LATENCY, NUM_ENTRIES_READ, NUM_BYTES_READ: the
    payload's bytes; NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION)."""
    start = now_ns()
    got = await _read_verified(bk, ledger, entry_id, sources, digest)
    if recorder is not None:
        if got is None:
            recorder.read_latency.fail_since(start)
            if recorder.entries_unreadable is not None:
                recorder.entries_unreadable.inc()
        else:
            recorder.read_latency.ok_since(start)
            recorder.entries_read.inc()
            recorder.bytes_read.ok_value(got[1])
    return got if got is not None else (None, 0)


def _write_recorded(bk, target: str, ledger: LedgerId, entry_id: int, data: bytes, master_key: bytes, payload: int,
                    recorder) -> defer.Deferred:
    """The recovery add of the stored bytes to `target`, recorded in `recorder` if given (Java's
    WRITE_DATA_LATENCY up to the bookie's answer, NUM_ENTRIES_WRITTEN, NUM_BYTES_WRITTEN: the payload's bytes)."""
    d = bk.bookie_client.add_entry(target, ledger.ledger_id, entry_id, data, master_key, recovery=True,
                                   scope_id=ledger.scope_id)
    if recorder is None:
        return d
    start = now_ns()

    def written(result):
        recorder.write_latency.ok_since(start)
        recorder.entries_written.inc()
        recorder.bytes_written.ok_value(payload)
        return result

    def failed(failure):
        recorder.write_latency.fail_since(start)
        return failure

    return d.addCallbacks(written, failed)


async def copy_segment(bk, ledger: LedgerId, md: LedgerMetadata, first: int, last: int, ensemble: tuple[str, ...],
                       replacements: dict[int, str], limiter: ByteRateLimiter | None = None,
                       window: int = DEFAULT_WINDOW, on_entry=None, read_replaced: bool = False,
                       recorder=None) -> CopyStats:
    """Copy entries [first, last] of the segment whose bookies at the `replacements` indexes are gone, to the
    new bookies (index -> new bookie id). `on_entry(bytes)` is called after each entry is written. With
    `read_replaced` (a placement repair moves replicas of live bookies) the replaced bookies are read too,
    after the others. `recorder`: a ReplicatorStats (bkfast.replication.stats) the reads and writes go to."""
    stats = CopyStats()
    if last < first or not replacements:
        return stats
    digest = DigestContext(md.digest_type, md.password, ledger.scope_id, ledger.ledger_id)
    e, w = md.ensemble_size, md.write_quorum_size
    gone = set(replacements)

    def work():
        for entry_id in range(first, last + 1):
            indexes = write_set(entry_id, e, w)
            targets = [replacements[i] for i in indexes if i in gone]
            if targets:
                sources = [ensemble[i] for i in indexes if i not in gone]
                if read_replaced:
                    sources += [ensemble[i] for i in indexes if i in gone]
                yield entry_id, sources, targets

    jobs = work()
    failures: list[BaseException] = []
    average = [1024.0]            # Java's running average entry size (start 1024; avg * 0.8 + size * 0.2)

    async def worker():
        for entry_id, sources, targets in jobs:
            if failures:
                return
            estimate = int(average[0]) * len(targets)
            if limiter is not None:       # before the read: the throttle bounds the reads too
                await limiter.acquire(estimate)
            data, payload = await _read_recorded(bk, ledger, entry_id, sources, digest, recorder)
            if data is None:
                stats.lost.append(entry_id)
                continue
            average[0] = average[0] * 0.8 + len(data) * 0.2
            if limiter is not None:       # the estimate was off by this much: the next acquire settles it
                limiter.charge(len(data) * len(targets) - estimate)
            try:
                await defer.gatherResults([_write_recorded(bk, t, ledger, entry_id, data, digest.master_key, payload,
                                                           recorder) for t in targets], consumeErrors=True)
            except defer.FirstError as err:
                failures.append(err.subFailure.value)
                return
            stats.entries += 1
            stats.bytes += len(data) * len(targets)
            if on_entry is not None:
                on_entry(len(data) * len(targets))

    await defer.gatherResults([defer.ensureDeferred(worker()) for _ in range(max(1, window))], consumeErrors=True)
    if failures:
        raise failures[0]
    stats.lost.sort()
    return stats


async def swap_bookies(bk, ledger: LedgerId, first: int, mapping: dict[str, str]) -> Versioned:
    """CAS the segment starting at `first`: every old bookie of `mapping` still in it becomes its new one.
    Re-reads and retries on a version conflict; leaves the metadata alone when no old bookie is left."""
    driver = bk.driver
    while True:
        versioned = await driver.read_ledger_metadata(ledger)
        md = versioned.metadata
        segments = list(md.ensembles)
        k = next((i for i, (start, _members) in enumerate(segments) if start == first), None)
        if k is None:
            return versioned
        start, members = segments[k]
        new_members = tuple(mapping.get(b, b) for b in members)
        if new_members == members:
            return versioned
        segments[k] = (start, new_members)
        try:
            updated = await driver.write_ledger_metadata(ledger, md.replace(ensembles=tuple(segments)),
                                                         versioned.version)
        except BKMetadataVersionException:
            continue
        log.info("ledger %d: segment at entry %d now %s (was %s)", ledger.ledger_id, first, ",".join(new_members),
                 ",".join(members))
        return updated
