"""The processes of one fault campaign, each in its own host namespace of a `Network`.

Owns starting, pausing, killing and restarting: a ZooKeeper server (host ``zk``), the bookies (hosts
``b1``..``bN``, each a real `bkfast bookie` bound to and registered as its namespace's address, port
3181; the odd ones take their adds on an add worker, the even ones on the reactor; the last one keeps its
ledger dir on a small tmpfs that the nemesis can fill; with `autorecovery`,
each also runs AutoRecovery with a lostBookieRecoveryDelay of 1 s) and the client processes (hosts
``w1``.., ``r1``, ``t1``, the stream writer ``sw1`` and reader ``sr1``, ``chk``: client_proc.py).
`close()` stops every process by pid (SIGCONT first, then SIGKILL), unmounts the tmpfs and removes the
namespaces, whatever state a failed campaign left them in.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bkfast.cli.local_cluster import LocalBookie
from bkfast.cli.local_zookeeper import ZooKeeperServer

from .netns import Network, run_in_netns

__all__ = ["FaultCluster", "BOOKIE_PORT", "ZK_PORT", "SESSION_TIMEOUT_MS"]

REPO = Path(__file__).resolve().parents[2]
BOOKIE_PORT = 3181
ZK_PORT = 2181
SESSION_TIMEOUT_MS = 3000      # ZooKeeper's maxSessionTimeout: every session expires after 3 s of silence
TMPFS_MB = 256                # big enough that 5 minutes of writes never fill it; the nemesis fills the rest
LOST_BOOKIE_DELAY_S = 1       # lostBookieRecoveryDelay: the auditor marks a lost bookie's ledgers 1 s after it went
AUTORECOVERY_CONF = {         # AutoRecovery inside every bookie, quick enough to act within a campaign
    "autoRecoveryDaemonEnabled": "true",
    "lostBookieRecoveryDelay": str(LOST_BOOKIE_DELAY_S),
    "openLedgerRereplicationGracePeriod": "3000",
    "rwRereplicateBackoffMs": "500",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
}


class _NsZooKeeper(ZooKeeperServer):
    """Debian's ZooKeeper JVM run inside a namespace (through a wrapper script, so the pid is the JVM's)."""

    def __init__(self, data_dir: Path, host: str, exec_prefix: list[str]):
        super().__init__(data_dir, port=ZK_PORT, tick_time=500, max_session_timeout=SESSION_TIMEOUT_MS,
                         start_timeout=60.0)
        self.host = host
        self.wrapper = Path(data_dir) / "java-in-netns"
        self._exec_prefix = exec_prefix

    def _launch(self, java: str, classpath: str) -> None:
        self.wrapper.write_text("#!/bin/sh\nexec " + " ".join(self._exec_prefix) + f" {java} \"$@\"\n")
        self.wrapper.chmod(0o755)
        super()._launch(str(self.wrapper), classpath)


class _NsBookie(LocalBookie):
    def command(self) -> list[str]:
        return self.exec_prefix + super().command()


class FaultCluster:
    """ZooKeeper + `bookies` bookies + client processes, in namespaces named `<prefix>-<host>`."""

    def __init__(self, work_dir: Path, bookies: int = 5, prefix: str | None = None, autorecovery: bool = False):
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.net: Network | None = None
        self.zk: _NsZooKeeper | None = None
        self.bookies: dict[str, _NsBookie] = {}
        self.clients: dict[str, subprocess.Popen] = {}
        self.stopped: set[int] = set()           # pids we SIGSTOPped and not yet continued
        self.tmpfs: Path | None = None
        self.prefix = prefix or f"bkf{os.getpid()}"     # unique per process: runs may overlap on one machine
        self.n_bookies = bookies
        self.autorecovery = autorecovery

    # --- start --------------------------------------------------------------------------------------
    def start(self) -> FaultCluster:
        try:
            self.net = Network(self.prefix)
            for host in ["zk", "chk"] + [f"b{i}" for i in range(1, self.n_bookies + 1)]:
                self.net.add_host(host)
            self.zk = _NsZooKeeper(self.dir / "zk", self.net.hosts["zk"], self.net.exec_prefix("zk"))
            self.start_zk()
            self.run_client("chk", "init", self.dir / "init.out", seconds=60, wait=True)
            names = list(self.bookie_names())
            for name in names:
                self.bookies[name] = self._make_bookie(name, tmpfs=(name == names[-1]))
            for name in names:
                self.bookies[name].launch()
            for name in names:
                self.bookies[name].wait_started()
        except BaseException:
            self.close()
            raise
        return self

    def bookie_names(self):
        return (f"b{i}" for i in range(1, self.n_bookies + 1))

    @property
    def metadata_uri(self) -> str:
        return f"zk+hierarchical://{self.net.hosts['zk']}:{ZK_PORT}/ledgers"

    def _make_bookie(self, name: str, tmpfs: bool) -> _NsBookie:
        data = self.dir / name
        ledgers = data / "ledgers"
        ledgers.mkdir(parents=True, exist_ok=True)
        if tmpfs:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "bkfast-faults", str(ledgers)],
                           check=True, capture_output=True)
            self.tmpfs = ledgers
        bookie = _NsBookie(data, BOOKIE_PORT, metadata_uri=self.metadata_uri, host=self.net.hosts[name],
                           extra_conf={
                               "zkTimeout": str(SESSION_TIMEOUT_MS),
                               "dbStorage_writeCacheMaxSizeMb": "8",
                               "dbStorage_readAheadCacheMaxSizeMb": "8",
                               "logSizeLimit": str(4 * 1024 * 1024),
                               "diskCheckInterval": "500",
                               "flushInterval": "1000",
                               # A mixed fleet: the odd bookies take their adds on an add worker, the
                               # even ones on the reactor (a 2-core host's default), so every campaign
                               # faults both paths.
                               "numAddWorkerThreads": "1" if int(name[1:]) % 2 else "0",
                               **(AUTORECOVERY_CONF if self.autorecovery else {}),
                           })
        bookie.exec_prefix = self.net.exec_prefix(name)
        return bookie

    def start_zk(self) -> None:
        run_in_netns(self.net.ns("chk"), self.zk.start)   # its readiness probes connect from host chk

    def add_client_hosts(self, names) -> None:
        for name in names:
            if name not in self.net.hosts:
                self.net.add_host(name)

    def run_client(self, host: str, role: str, history: Path, seconds: float, wait: bool = False,
                   seed: int = 0, hint: Path | str | None = None) -> subprocess.Popen:
        """Start tests/faults/client_proc.py as `role` in `host`'s namespace (logs to <history>.log)."""
        cmd = self.net.exec_prefix(host) + [sys.executable, "-m", "tests.faults.client_proc", role, self.metadata_uri,
                                            str(history), str(seed), str(seconds)] + ([str(hint)] if hint else [])
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        with open(f"{history}.log", "ab") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.clients[f"{host}:{role}:{proc.pid}"] = proc
        if wait:
            try:
                rc = proc.wait(seconds + 30)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                rc = "timeout"
            if rc != 0:
                raise RuntimeError(f"client {role} in {host} failed ({rc}); log {history}.log:\n"
                                   + Path(f"{history}.log").read_text(errors="replace")[-3000:])
        return proc

    # --- faults -------------------------------------------------------------------------------------
    def pause(self, pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.stopped.add(pid)

    def resume(self, pid: int) -> None:
        self.stopped.discard(pid)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def kill_bookie(self, name: str) -> None:
        bookie = self.bookies[name]
        if bookie.pid is not None:
            self.resume(bookie.pid)
        bookie.kill()

    def restart_bookie(self, name: str, timeout_s: float = 90.0) -> None:
        """Start the bookie again if it is not running; retried while it cannot start (ZooKeeper down,
        its old registration not yet expired)."""
        bookie = self.bookies[name]
        deadline = time.monotonic() + timeout_s
        while not bookie.alive():
            bookie.kill()
            try:
                bookie.start()
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def stop_zk(self) -> None:
        if self.zk.pid is not None:
            self.resume(self.zk.pid)
        self.zk.stop(timeout=5.0)

    def fill_disk(self) -> Path | None:
        """Fill the tmpfs ledger dir to the last 64 KiB; returns the filler file."""
        if self.tmpfs is None:
            return None
        filler = self.tmpfs / "faults-filler"
        stat = os.statvfs(self.tmpfs)
        free = stat.f_bavail * stat.f_frsize - 64 * 1024
        try:
            f = open(filler, "ab")
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            return None                  # the bookies' own writes filled it first: the fault is in place
        with f:
            chunk = b"\0" * (1 << 20)
            while free > 0:
                try:
                    f.write(chunk[:min(free, len(chunk))])
                except OSError:
                    break
                free -= len(chunk)
        return filler

    def empty_disk(self) -> None:
        if self.tmpfs is not None:
            try:
                (self.tmpfs / "faults-filler").unlink()
            except FileNotFoundError:
                pass

    def heal(self) -> None:
        """Every link up, every process continued, ZooKeeper and every bookie running, the disk emptied."""
        self.net.heal()
        for pid in list(self.stopped):
            self.resume(pid)
        self.empty_disk()
        if not self.zk.is_running():
            self.start_zk()
        for name in self.bookies:
            self.restart_bookie(name)

    # --- teardown -----------------------------------------------------------------------------------
    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)

    def close(self) -> None:
        errors = []
        for pid in list(self.stopped):
            self.resume(pid)
        for proc in self.clients.values():
            self._kill(proc)
        for bookie in self.bookies.values():
            try:
                if bookie.pid is not None:
                    self.resume(bookie.pid)
                bookie.kill()
            except Exception as exc:       # keep tearing down
                errors.append(f"bookie: {exc}")
        if self.zk is not None:
            if self.zk.pid is not None:
                self.resume(self.zk.pid)
            self.zk.stop(timeout=5.0)
        if self.tmpfs is not None:
            for _ in range(20):
                if subprocess.run(["umount", str(self.tmpfs)], capture_output=True).returncode == 0:
                    self.tmpfs = None
                    break
                time.sleep(0.2)
            else:
                errors.append(f"could not unmount {self.tmpfs}")
        if self.net is not None:
            try:
                self.net.close()
            except Exception as exc:
                errors.append(str(exc))
            self.net = None
        if errors:
            raise RuntimeError("fault cluster teardown: " + "; ".join(errors))

    def __enter__(self) -> FaultCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
