"""The nemesis: injects faults into a FaultCluster, at random, from a seed.

Fault types (`FAULTS`):
  * ``partition``          a bookie, writer or reader (also the stream's) is cut from a random set of other
                           hosts (nftables drop);
  * ``isolate_writer_zk``  a writer is cut from ZooKeeper but not from its bookies, long enough for its
                           session to expire, and the recoverer is told to recover that writer's ledger
                           (the writer believed dead while it can still reach the bookies);
  * ``pause``              SIGSTOP a bookie, a writer or the recoverer past the ZooKeeper session timeout,
                           then SIGCONT (a paused writer's ledger is recovered meanwhile);
  * ``kill_bookie``        SIGKILL a bookie, then restart it on the same directories (with AutoRecovery, half
                           the time only after its ledgers were marked lost and are being re-replicated);
  * ``zk_restart``         stop the ZooKeeper server, then start it again on the same data;
  * ``disk_full``          fill the tmpfs ledger dir of the last bookie, then empty it.

Random schedules may run two faults at once on different hosts (`overlap`). Every fault's start and end
go to the history (process ``nemesis``). Owns the schedule and nothing else:
what a fault does to processes and links is the cluster's.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

from .cluster import LOST_BOOKIE_DELAY_S, SESSION_TIMEOUT_MS, FaultCluster

__all__ = ["FAULTS", "Nemesis"]

FAULTS = ("partition", "isolate_writer_zk", "pause", "kill_bookie", "zk_restart", "disk_full")
SESSION_S = SESSION_TIMEOUT_MS / 1000.0
STREAM_HOSTS = ("sw1", "sr1")      # not "sw": that is the switch's namespace


class Nemesis:
    def __init__(self, cluster: FaultCluster, rng: random.Random, history: Path, writers: dict[str, Path],
                 hint: Path):
        self.cluster = cluster
        self.rng = rng
        self.file = open(history, "a", buffering=1)
        self.writers = writers          # writer host -> its history file
        self.hint = hint
        self.counts = {f: 0 for f in FAULTS}
        self.busy: set[str] = set()          # hosts a running fault targets
        self._lock = threading.Lock()

    def record(self, op: str, **fields) -> None:
        fields.update(t=time.monotonic_ns(), p="nemesis", op=op)
        with self._lock:
            self.file.write(json.dumps(fields, separators=(",", ":")) + "\n")

    def run(self, until: float, faults: list[str] | None = None, overlap: float = 0.0) -> None:
        """Inject faults until `until` (monotonic): the given ones in order, else random ones; with
        probability `overlap` a second random fault runs at the same time (on other hosts)."""
        queue = list(faults) if faults is not None else None
        while time.monotonic() < until - 1.0:
            if queue is not None and not queue:
                break
            kind = queue.pop(0) if queue is not None else self.rng.choice(FAULTS)
            second, errors = None, []
            if queue is None and self.rng.random() < overlap:
                other, other_rng = self.rng.choice([f for f in FAULTS if f != kind]), random.Random(self.rng.random())

                def run_other(other=other, other_rng=other_rng, errors=errors):
                    try:
                        self.inject(other, until, other_rng)
                    except BaseException as exc:     # re-raised in the nemesis's own thread below
                        errors.append(exc)

                second = threading.Thread(target=run_other, name=f"nemesis-{other}", daemon=True)
                second.start()
            try:
                self.inject(kind, until, self.rng)
            finally:
                if second is not None:
                    second.join()
            if errors:
                raise errors[0]
            self._sleep(self.rng.uniform(0.5, 1.5), until)

    def _sleep(self, seconds: float, until: float) -> None:
        time.sleep(max(0.0, min(seconds, until - time.monotonic())))

    def _take(self, rng: random.Random, candidates) -> str | None:
        """A random candidate no other running fault targets, now marked busy."""
        with self._lock:
            free = [h for h in candidates if h not in self.busy]
            if not free:
                return None
            host = rng.choice(free)
            self.busy.add(host)
            return host

    def inject(self, kind: str, until: float, rng: random.Random) -> None:
        c = self.cluster
        bookies = list(c.bookies)
        writers = list(self.writers)
        readers = ["r1", "t1"]
        streams = [h for h in STREAM_HOSTS if h in c.net.hosts]   # the stream writer and reader, if running
        candidates = {"partition": bookies + writers + readers + streams, "isolate_writer_zk": writers,
                      "pause": bookies + writers + readers[:1] + streams, "kill_bookie": bookies,
                      "zk_restart": ["zk"], "disk_full": bookies[-1:]}
        if kind not in candidates:
            raise ValueError(f"unknown fault {kind!r}; expected one of {', '.join(FAULTS)}")
        host = self._take(rng, candidates[kind])
        if host is None:
            return
        with self._lock:
            self.counts[kind] += 1
        try:
            self._inject(kind, host, until, rng)
        finally:
            with self._lock:
                self.busy.discard(host)
        self.record("fault", kind=kind, phase="end", host=host)

    def _inject(self, kind: str, host: str, until: float, rng: random.Random) -> None:
        c = self.cluster
        if kind == "partition":
            others = [h for h in c.net.hosts if h not in (host, "chk")]
            peers = rng.sample(others, rng.randint(1, len(others)))
            self.record("fault", kind=kind, phase="start", host=host, peers=peers)
            c.net.cut(host, peers)
            self._sleep(rng.uniform(2.0, 5.0), until)
            c.net.uncut(host)
        elif kind == "isolate_writer_zk":
            ledger = self._current_ledger(host)
            self.record("fault", kind=kind, phase="start", host=host, ledger=ledger)
            c.net.cut(host, ["zk"])
            self._sleep(SESSION_S + 0.5, until)
            if ledger is not None:
                self.hint.write_text(str(ledger))
            self._sleep(rng.uniform(2.0, 4.0), until)
            c.net.uncut(host)
        elif kind == "pause":
            pid = c.bookies[host].pid if host in c.bookies else self._client_pid(host)
            self.record("fault", kind=kind, phase="start", host=host, pid=pid)
            if pid is not None:
                c.pause(pid)
                if host in self.writers:         # a writer that looks dead: have its ledger recovered
                    self._sleep(SESSION_S / 2, until)
                    ledger = self._current_ledger(host)
                    if ledger is not None:
                        self.hint.write_text(str(ledger))
                    self._sleep(SESSION_S / 2 + rng.uniform(1.0, 2.0), until)
                else:
                    self._sleep(SESSION_S + rng.uniform(1.0, 2.0), until)
                c.resume(pid)
        elif kind == "kill_bookie":
            # down briefly (back before anyone notices), or past its session and lostBookieRecoveryDelay, so
            # that with AutoRecovery its ledgers are marked and re-replicated while it is away; either way it
            # comes back on the same directories
            lost = c.autorecovery and rng.random() < 0.5
            down = SESSION_S + LOST_BOOKIE_DELAY_S + rng.uniform(1.0, 3.0) if lost else rng.uniform(0.5, 3.0)
            self.record("fault", kind=kind, phase="start", host=host, down_s=round(down, 1))
            c.kill_bookie(host)
            self._sleep(down, until)
            c.restart_bookie(host)
        elif kind == "zk_restart":
            self.record("fault", kind=kind, phase="start", host=host)
            c.stop_zk()
            self._sleep(rng.uniform(1.0, 4.0), until)
            c.start_zk()
        elif kind == "disk_full":
            self.record("fault", kind=kind, phase="start", host=host)
            c.fill_disk()
            self._sleep(rng.uniform(2.0, 5.0), until)
            c.empty_disk()

    def heal(self) -> None:
        self.cluster.heal()
        self.record("heal")

    def _client_pid(self, host: str) -> int | None:
        for key, proc in self.cluster.clients.items():
            if key.startswith(f"{host}:") and proc.poll() is None:
                return proc.pid
        return None

    def _current_ledger(self, host: str) -> int | None:
        ledger = None
        try:
            with open(self.writers[host]) as f:
                for line in f:
                    if '"op":"create"' in line and '"phase":"ok"' in line:
                        try:
                            ledger = json.loads(line)["ledger"]
                        except (json.JSONDecodeError, KeyError):
                            pass
        except FileNotFoundError:
            pass
        return ledger

    def close(self) -> None:
        self.file.close()
