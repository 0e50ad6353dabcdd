"""The ledger client's stats under Java's names (BookKeeperClientStats, BookieWatcher, the placement policy's,
the worker pool's), recorded into the StatsLogger the client is given (`AsyncBookKeeper(stats=...)`).

A client given no StatsLogger records into a disabled registry: every stat is a no-op and `enabled` is
False, so the per-add timing (ADD_ENTRY, the one stat that would cost a Python call per add) is not even
set up. AutoRecovery hands its client `<scope>_bookkeeper_client`, as Java's AutoRecovery does; the
names below are then `<scope>_bookkeeper_client_bookkeeper_client_<NAME>` and `<scope>_bookkeeper_client_
BookKeeperClientWorker_*` (the client's ZooKeeper session adds `..._zk_*` and `..._watcher_state_*`).

Where each is measured (bkfast's client):
  ADD_ENTRY                   one add, from add_entry to its completion (ok) or failure; with AQ acks but a
                              bookie of its write set failing it, also ADD_ENTRY_UR
  READ_ENTRY                  one read_entries call (a range), to its last entry or its failure;
                              READ_ENTRY_DM: replicas that failed digest verification
  LEDGER_CREATE/OPEN/DELETE   create_ledger(_adv) / open_ledger (with or without recovery) / delete_ledger
  LEDGER_RECOVER              the recovery of an open ledger (fence, read forward, re-add, close);
  LEDGER_RECOVER_READ_ENTRIES / _ADD_ENTRIES  values: entries read / re-added by one recovery
  READ_LAC                    read_explicit_lac; READ_LAST_CONFIRMED_AND_ENTRY: one long poll, and
  READ_LAST_CONFIRMED_AND_ENTRY_RESPONSE      each bookie's answer to it; LAC_UPDATE_HITS/MISSES: polls
                                              that did / did not learn a newer LAC
  WRITE_LAC                   one explicit-LAC write to one bookie; FORCE: one force()
  NUM_ENSEMBLE_CHANGE         ensemble changes written; SPECULATIVE_READ_COUNT: speculative reads sent
  bookie_watcher_NEW_ENSEMBLE_TIME / _REPLACE_BOOKIE_TIME   the placement policy choosing a new ensemble /
                              replacements (fails: not enough bookies)
  BOOKIES_JOINED / BOOKIES_LEFT  value 1 per writable bookie that joined / left (as Java's policy)
  NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK  writable bookies the topology puts at the default location
  BookKeeperClientWorker_threads 0 and _max_queue_size -1, task_queued / task_execution never recorded:
                              bkfast's client has no worker pool (its callbacks run on the reactor thread)
Registered and left at 0, the parts bkfast's client does not have: CLIENT_CHANNEL_WRITE_WAIT (a channel
is never waited for: its output is buffered), READ_REQUESTS_REORDERED, the WRITE_*_NOT_ENOUGH_FAULT_DOMAINS
trio, FAILED_TO_RESOLVE_NETWORK_LOCATION_TOTAL and bookie_watcher_ENSEMBLE_NOT_ADHERING_TO_PLACEMENT_POLICY_TOTAL
(the placement code may count into them: the attributes are public).
"""

from __future__ import annotations

from bkfast._stats import now_ns
from bkfast.stats import Counter, OpStats, StatsLogger, StatsRegistry

__all__ = ["ClientStats", "CLIENT_SCOPE", "WORKER_POOL", "stats_of", "timed"]

CLIENT_SCOPE = "bookkeeper_client"
WORKER_POOL = "BookKeeperClientWorker"

_OPS = {
    "add": "ADD_ENTRY", "read": "READ_ENTRY", "create": "LEDGER_CREATE", "open": "LEDGER_OPEN",
    "delete": "LEDGER_DELETE", "recover": "LEDGER_RECOVER", "recover_adds": "LEDGER_RECOVER_ADD_ENTRIES",
    "recover_reads": "LEDGER_RECOVER_READ_ENTRIES", "read_lac": "READ_LAC",
    "read_lac_and_entry": "READ_LAST_CONFIRMED_AND_ENTRY",
    "read_lac_and_entry_response": "READ_LAST_CONFIRMED_AND_ENTRY_RESPONSE", "write_lac": "WRITE_LAC",
    "force": "FORCE", "channel_write_wait": "CLIENT_CHANNEL_WRITE_WAIT",
    "reads_reordered": "READ_REQUESTS_REORDERED",
    "write_delayed_latency": "WRITE_DELAYED_DUE_TO_NOT_ENOUGH_FAULT_DOMAINS_LATENCY",
    "bookies_joined": "BOOKIES_JOINED", "bookies_left": "BOOKIES_LEFT",
    "new_ensemble": "bookie_watcher_NEW_ENSEMBLE_TIME", "replace_bookie": "bookie_watcher_REPLACE_BOOKIE_TIME",
}
_COUNTERS = {
    "add_ur": "ADD_ENTRY_UR", "read_dm": "READ_ENTRY_DM", "ensemble_changes": "NUM_ENSEMBLE_CHANGE",
    "lac_update_hits": "LAC_UPDATE_HITS", "lac_update_misses": "LAC_UPDATE_MISSES",
    "speculative_reads": "SPECULATIVE_READ_COUNT",
    "write_delayed": "WRITE_DELAYED_DUE_TO_NOT_ENOUGH_FAULT_DOMAINS",
    "write_timed_out": "WRITE_TIME_OUT_DUE_TO_NOT_ENOUGH_FAULT_DOMAINS",
    "failed_to_resolve_location": "FAILED_TO_RESOLVE_NETWORK_LOCATION_TOTAL",
    "ensemble_not_adhering": "bookie_watcher_ENSEMBLE_NOT_ADHERING_TO_PLACEMENT_POLICY_TOTAL",
}


class ClientStats:
    """Every stat of one client, as attributes named by the keys of _OPS (OpStats) and _COUNTERS (Counter)."""

    # Set in __init__ from _OPS and _COUNTERS (same names).
    add: OpStats
    read: OpStats
    create: OpStats
    open: OpStats
    delete: OpStats
    recover: OpStats
    recover_adds: OpStats
    recover_reads: OpStats
    read_lac: OpStats
    read_lac_and_entry: OpStats
    read_lac_and_entry_response: OpStats
    write_lac: OpStats
    force: OpStats
    channel_write_wait: OpStats
    reads_reordered: OpStats
    write_delayed_latency: OpStats
    bookies_joined: OpStats
    bookies_left: OpStats
    new_ensemble: OpStats
    replace_bookie: OpStats
    add_ur: Counter
    read_dm: Counter
    ensemble_changes: Counter
    lac_update_hits: Counter
    lac_update_misses: Counter
    speculative_reads: Counter
    write_delayed: Counter
    write_timed_out: Counter
    failed_to_resolve_location: Counter
    ensemble_not_adhering: Counter

    def __init__(self, logger: StatsLogger | None = None):
        if logger is None:
            logger = StatsRegistry(enabled=False).logger()
        self.logger = logger
        self.enabled = logger.enabled
        client = logger.scope(CLIENT_SCOPE)
        for attr, name in _OPS.items():
            setattr(self, attr, client.op_stats(name))
        for attr, name in _COUNTERS.items():
            setattr(self, attr, client.counter(name))
        self._client = client
        logger.gauge(f"{WORKER_POOL}_threads", lambda: 0)
        logger.gauge(f"{WORKER_POOL}_max_queue_size", lambda: -1)
        logger.op_stats(f"{WORKER_POOL}_task_queued")
        logger.op_stats(f"{WORKER_POOL}_task_execution")

    def watch_client(self, bk) -> None:
        """The gauges that read the client: NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK."""
        self._client.gauge("NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK", lambda: _in_default_location(bk))

    def bookies_changed(self, before, after) -> None:
        """BOOKIES_JOINED / BOOKIES_LEFT: one event of value 1 per writable bookie that came or went."""
        for _ in range(len(after.keys() - before.keys())):
            self.bookies_joined.ok_value(1)
        for _ in range(len(before.keys() - after.keys())):
            self.bookies_left.ok_value(1)

    def time(self, op: str, d, start: int | None = None):
        """Record the Deferred `d` (started at `start`, default now) as OpStats `op`: ok or fail with its
        latency. Returns `d` with its result unchanged (untouched when the stats are disabled)."""
        if not self.enabled:
            return d
        stat = getattr(self, op)
        if start is None:
            start = now_ns()

        def ok(result):
            stat.ok_since(start)
            return result

        def failed(failure):
            stat.fail_since(start)
            return failure

        return d.addCallbacks(ok, failed)


DISABLED = ClientStats()


def stats_of(bk) -> ClientStats:
    """The ClientStats of a client (a disabled one for anything that has none)."""
    return getattr(bk, "client_stats", None) or DISABLED


def timed(stat, fn, *args, **kwargs):
    """`fn(*args, **kwargs)` recorded as OpStats `stat`: ok with its latency, or fail if it raises."""
    start = now_ns()
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        stat.fail_since(start)
        raise
    stat.ok_since(start)
    return result


def _in_default_location(bk) -> int:
    topology = getattr(getattr(bk, "placement", None), "topology", None)
    if topology is None:
        return len(bk.writable_bookies)
    default = topology.default_location
    return sum(1 for bookie in list(bk.writable_bookies) if topology.location(bookie) == default)
