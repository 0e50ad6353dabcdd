"""`bkfast sandbox`: a whole local cluster in one command.

Metadata: embedded (default; `embedded://<data dir>/metadata`, held by this process, which registers
the bookies), or a real ZooKeeper (`--zk` starts Debian's ZooKeeper on a free loopback port; `--zk-connect`
uses a running one), so Java clients and Spark executors can join. N bookies run as `bkfast bookie`
subprocesses on loopback ports with their data under the data dir; a data dir used before keeps its
bookie ports (ledger metadata names bookies by address). `DIR/sandbox.json` (`metadata_uri`, `bookies`,
the sandbox's `pid`) is written once the cluster serves; `DIR/sandbox.lock` (flock) keeps a second sandbox
off a data dir in use. A user's mistake (an unreachable --zk-connect, a data dir in use, a bookie that
cannot start) is one line on stderr and exit code 1 (2 for usage); `--verbose` adds the traceback.
`--demo` writes and reads a ledger and shows recovery and fencing.
`--tls` makes a throwaway CA under DIR/tls (bkfast.tls.certs), a bookie certificate for 127.0.0.1 and a
client certificate with the role `bkclient` (OU `0:bkclient;1:sandbox`); the bookies then require TLS
with mutual authentication and BookieAuthZFactory, and DIR/tls/client.conf holds the client's keys.
The cluster serves until Ctrl-C / SIGTERM; then every bookie (and ZooKeeper) is stopped by pid.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bkfast.errors import BKError, ConfigurationError, MetadataError

from .local_cluster import LocalBookie, free_port, start_bookies

if TYPE_CHECKING:
    from bkfast.meta.driver import MetadataDriver

    from .local_etcd import EtcdServer
    from .local_zookeeper import ZooKeeperServer

log = logging.getLogger(__name__)

SANDBOX_FILE = "sandbox.json"
LOCK_FILE = "sandbox.lock"
ZK_CONNECT_TIMEOUT_S = 10.0


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop()


class Sandbox:
    """The running pieces of a sandbox; `stop()` undoes `start()` in reverse order."""

    def __init__(self, data_dir: Path, bookies: int, zk: bool, zk_connect: str | None, tls: bool = False,
                 etcd: bool = False):
        self.data_dir = data_dir
        self.tls = tls
        self.bookie_conf: dict[str, str] = {}
        self.client_conf: dict[str, str] = {}
        self.num_bookies = bookies
        self.start_zk = zk
        self.zk_connect = zk_connect
        self.zk_server: ZooKeeperServer | None = None
        self.start_etcd = etcd
        self.etcd_server: EtcdServer | None = None
        self.driver: MetadataDriver | None = None
        self.bookies: list[LocalBookie] = []
        self.metadata_uri = ""
        self._lock_fd: int | None = None

    def _lock(self) -> None:
        """Hold `DIR/sandbox.lock` for the life of this process (the kernel drops it when the process ends);
        ClickException naming the running sandbox's pid when another process holds it."""
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder_pid(fd)
            os.close(fd)
            who = f"a running sandbox (pid {holder})" if holder else "another running sandbox"
            stop = f"stop it (kill {holder})" if holder else "stop it"
            raise click.ClickException(
                f"data dir {self.data_dir} is used by {who}; {stop} or give another --data-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _holder_pid(self, lock_fd: int) -> int | None:
        """The pid of the sandbox holding the lock: sandbox.json's `pid` if that process is alive, else the
        pid the lock file names (the holder writes it; sandbox.json appears only once the cluster serves)."""
        candidates = [self._previous().get("pid")]
        try:
            candidates.append(int(os.pread(lock_fd, 32, 0).decode().strip() or 0))
        except (OSError, ValueError):
            pass
        for pid in candidates:
            if isinstance(pid, int) and pid > 0 and pid != os.getpid() and _alive(pid):
                return pid
        return None

    def _previous(self) -> dict:
        try:
            previous = json.loads((self.data_dir / SANDBOX_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return previous if isinstance(previous, dict) else {}

    def _previous_ports(self) -> list[int]:
        try:
            return [int(b.rsplit(":", 1)[1]) for b in self._previous().get("bookies", [])]
        except (ValueError, IndexError, AttributeError):
            return []

    def _previous_zk_port(self, key: str = "zookeeper_port") -> int | None:
        """The ZooKeeper (or etcd) port of the last run on this data dir, if it is free again: the metadata URI
        (and so every client's configuration) stays the same across restarts."""
        port = self._previous().get(key)
        if not isinstance(port, int):
            return None
        import socket

        with socket.socket() as s:
            # As ZooKeeper binds (SO_REUSEADDR): the last run's connections in TIME_WAIT do not count.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                log.warning("%s %d of the previous run is taken; using another one", key, port)
                return None
        return port

    def _init_zk(self, connect: str) -> str:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        from bkfast.meta import zk_layout
        from bkfast.meta.zk_client import quiet_connect_attempts

        client = KazooClient(hosts=connect, timeout=15.0)
        try:
            with quiet_connect_attempts(client):
                client.start(timeout=ZK_CONNECT_TIMEOUT_S)
        except KazooTimeoutError:
            client.close()
            what = "the sandbox's ZooKeeper" if self.start_zk else "--zk-connect"
            raise click.ClickException(
                f"cannot reach ZooKeeper at {connect} ({what}) within {ZK_CONNECT_TIMEOUT_S:g} s: start it and "
                "check HOST:PORT, or use --zk to start a local one") from None
        try:
            zk_layout.ensure_cluster(client, "/ledgers")
        finally:
            client.stop()
            client.close()
        return f"zk+hierarchical://{connect}/ledgers"

    def _start_etcd(self) -> str:
        """A local etcd (Debian's etcd-server) in DIR/etcd, its cluster initialized once: the etcd:// URI."""
        from bkfast.meta.etcd_cluster import init_new_etcd_cluster, read_etcd_instance_id
        from bkfast.meta.etcd_driver import etcd_client_from_conf

        from .local_etcd import EtcdServer

        self.etcd_server = server = EtcdServer(str(self.data_dir / "etcd"),
                                               port=self._previous_zk_port("etcd_port")).start()
        uri = f"etcd://{server.endpoint}/ledgers"
        kv = etcd_client_from_conf(uri)
        try:
            if read_etcd_instance_id(kv, "/ledgers") is None:
                init_new_etcd_cluster(kv, "/ledgers")
        finally:
            kv.close()
        return uri

    def _start_metadata(self) -> str:
        """The metadata store the options ask for, started and initialized: its URI."""
        if self.start_zk:
            from .local_zookeeper import ZooKeeperServer

            self.zk_server = ZooKeeperServer(self.data_dir / "zookeeper", port=self._previous_zk_port()).start()
            return self._init_zk(self.zk_server.connect_string)
        if self.zk_connect:
            return self._init_zk(self.zk_connect)
        if self.start_etcd:
            return self._start_etcd()
        return f"embedded://{(self.data_dir / 'metadata').resolve()}"

    def start(self) -> None:
        from bkfast.meta.factory import open_metadata_driver
        from bkfast.reactor import call, start_reactor_thread

        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise click.ClickException(f"--data-dir {self.data_dir}: cannot create it ({err.strerror}); give a "
                                       "directory this user can create and write") from err
        self._lock()
        self.metadata_uri = self._start_metadata()
        # The bookies register themselves in a shared store; the embedded one is this process's alone.
        shared_uri = None if self.metadata_uri.startswith("embedded") else self.metadata_uri
        start_reactor_thread()
        driver = self.driver = open_metadata_driver(self.metadata_uri)
        call(driver.start, timeout=60)

        if self.tls:
            self.bookie_conf, self.client_conf = make_sandbox_pki(self.data_dir / "tls")
        ports = self._previous_ports()
        self.bookies = [LocalBookie(self.data_dir / f"bookie-{index}",
                                    ports[index] if index < len(ports) else free_port(), shared_uri,
                                    dict(self.bookie_conf))
                        for index in range(self.num_bookies)]
        try:
            start_bookies(self.bookies)
        except RuntimeError:
            raise click.ClickException(self._bookie_failure()) from None
        for bookie in self.bookies:
            log.info("sandbox bookie %s started (pid %d)", bookie.bookie_id, bookie.pid)
        if shared_uri is None:
            from bkfast.meta.registration import bookie_service_info

            for bookie in self.bookies:
                service = bookie_service_info(bookie.host, bookie.port, extensions=("tls",) if self.tls else ())
                call(driver.register_bookie, bookie.bookie_id, service, timeout=30)
        deadline = time.monotonic() + 60
        while len(call(driver.get_bookies, False, timeout=30)) < self.num_bookies:
            if time.monotonic() > deadline:
                raise click.ClickException("bookies did not register within 60 s")
            time.sleep(0.2)
        info: dict[str, object] = {
            "pid": os.getpid(), "metadata_uri": self.metadata_uri, "bookies": [b.bookie_id for b in self.bookies],
            "pids": {b.bookie_id: b.pid for b in self.bookies}, "data_dir": str(self.data_dir)}
        if self.zk_server is not None:
            info["zookeeper_pid"] = self.zk_server.pid
            info["zookeeper_port"] = self.zk_server.port
        if self.etcd_server is not None:
            info["etcd_pid"] = self.etcd_server.pid
            info["etcd_port"] = self.etcd_server.client_port
        if self.tls:
            info["client_conf"] = self.client_conf
            info["client_conf_file"] = str(self.data_dir / "tls" / "client.conf")
        tmp = self.data_dir / (SANDBOX_FILE + ".tmp")
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, self.data_dir / SANDBOX_FILE)

    def stop(self) -> None:
        from bkfast.reactor import call

        for bookie in self.bookies:
            try:
                rc = bookie.stop()
                log.info("sandbox bookie %s stopped (exit %s)", bookie.bookie_id, rc)
            except Exception:
                log.exception("stopping bookie %s failed; killing it", bookie.bookie_id)
                bookie.kill()
        if self.driver is not None:
            try:
                call(self.driver.close, timeout=30)
            except Exception:
                log.exception("closing the metadata driver failed")
        if self.zk_server is not None:
            self.zk_server.stop()
        if self.etcd_server is not None:
            self.etcd_server.stop()
        if self._lock_fd is not None:
            os.close(self._lock_fd)         # releases the flock
            self._lock_fd = None

    def _bookie_failure(self) -> str:
        """One line for bookies that did not start: the first one's own error line (its log's "Error: ...")."""
        for bookie in self.bookies:
            try:
                lines = bookie.log_path.read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            error = next((line[len("Error: "):] for line in reversed(lines) if line.startswith("Error: ")), None)
            if error:
                return f"bookie {bookie.bookie_id} did not start: {error} (log: {bookie.log_path})"
        return f"a bookie did not start; see its log under {self.data_dir}/bookie-*/bookie.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_sandbox_pki(directory: Path) -> tuple[dict, dict]:
    """A throwaway CA, bookie and client certificates in `directory` (kept if already there); returns
    (bookie keys, client keys) with BookKeeper's names, and writes client.conf with the client's."""
    from bkfast.tls.certs import CertificateAuthority

    directory.mkdir(parents=True, exist_ok=True)
    ca_path = directory / "ca.pem"
    if not (ca_path.exists() and (directory / "client.key").exists() and (directory / "bookie.key").exists()):
        ca = CertificateAuthority("bkfast sandbox CA")
        ca.issue("127.0.0.1", hosts=("127.0.0.1", "localhost")).write_pem(directory, "bookie")
        ca.issue("sandbox-client", ou="0:bkclient;1:sandbox").write_pem(directory, "client")
        ca.write_pem(ca_path)
    factory = "org.apache.bookkeeper.tls.TLSContextFactory"
    bookie = {"tlsProviderFactoryClass": factory, "tlsKeyStoreType": "PEM",
              "tlsKeyStore": str(directory / "bookie.key"), "tlsCertificatePath": str(directory / "bookie.pem"),
              "tlsClientAuthentication": "true", "tlsTrustStoreType": "PEM", "tlsTrustStore": str(ca_path),
              "bookieAuthProviderFactoryClass": "org.apache.bookkeeper.tls.BookieAuthZFactory",
              "authorizedRoles": "bkclient"}
    client = {"tlsProviderFactoryClass": factory, "tlsTrustStoreType": "PEM", "tlsTrustStore": str(ca_path),
              "tlsClientAuthentication": "true", "tlsKeyStoreType": "PEM",
              "tlsKeyStore": str(directory / "client.key"), "tlsCertificatePath": str(directory / "client.pem"),
              "tlsHostnameVerificationEnabled": "true"}
    (directory / "client.conf").write_text("# bkfast sandbox client TLS keys (BookKeeper's names)\n"
                                           + "".join(f"{k}={v}\n" for k, v in client.items()))
    return bookie, client


def run_demo(metadata_uri: str, entries: int, out=print, client_conf: dict | None = None) -> dict:
    """Create a ledger (E=3 W=2 A=2), write `entries` entries, read them back, recover it from a second
    client and show that the first writer is fenced. Returns the measured numbers."""
    from bkfast import BookKeeper
    from bkfast.errors import BKLedgerFencedException

    rng = random.Random(42)
    payloads = [rng.randbytes(rng.randint(100, 1024)) for _ in range(entries)]
    password = b"sandbox-demo"
    results = {}
    # throttle=0: no per-handle rate limit (BookKeeper's default is 5,000 adds/s), so the demo shows
    # what the cluster can do, as BookKeeper's own benchmarks are run
    client_conf = client_conf or {}
    if client_conf:
        out("demo: the client talks TLS with a client certificate (role bkclient)")
    with BookKeeper(metadata_uri, throttle=0, **client_conf) as writer_client:
        lh = writer_client.create_ledger(3, 2, 2, digest_type="CRC32C", password=password)
        out(f"demo: created ledger {lh.ledger_id} on {', '.join(lh.metadata.ensembles[0][1])}")
        started = time.perf_counter()
        ids = lh.add_entries(payloads, max_outstanding=1000)
        elapsed = time.perf_counter() - started
        assert ids == list(range(entries)), "entry ids are not 0..n-1"
        size_mb = sum(map(len, payloads)) / 1e6
        results["write_adds_per_s"] = entries / elapsed
        out(f"demo: wrote {entries} entries ({size_mb:.1f} MB) in {elapsed:.2f} s: "
            f"{entries / elapsed:,.0f} adds/s, {size_mb / elapsed:.1f} MB/s")
        started = time.perf_counter()
        read_back = lh.read_entries(0, entries - 1)
        elapsed = time.perf_counter() - started
        mismatches = sum(1 for e, p in zip(read_back, payloads, strict=True) if e.data != p)
        if mismatches:
            raise click.ClickException(f"demo: {mismatches} entries read back differently")
        results["read_entries_per_s"] = entries / elapsed
        out(f"demo: read them back byte-identical in {elapsed:.2f} s: {entries / elapsed:,.0f} entries/s")
        with BookKeeper(metadata_uri, **client_conf) as reader_client:
            started = time.perf_counter()
            rh = reader_client.open_ledger(lh.ledger_id, password, recovery=True)
            out(f"demo: a second client recovered the ledger in {time.perf_counter() - started:.2f} s: "
                f"closed at entry {rh.metadata.last_entry_id}, {rh.metadata.length} bytes")
            results["recovered_last_entry_id"] = rh.metadata.last_entry_id
        try:
            lh.add_entry(b"after recovery")
            raise click.ClickException("demo: the first writer could still add after recovery (not fenced)")
        except BKLedgerFencedException:
            out("demo: the first writer's next add was refused: the ledger is fenced, as it must be")
        lh.close()
    return results


@click.command("sandbox")
@click.option("--bookies", "num_bookies", type=click.IntRange(1, 64), default=3, show_default=True,
              help="Number of bookie processes.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where bookies and metadata keep their data (default: a new temporary dir, removed on exit).")
@click.option("--zk", "start_zk", is_flag=True, default=False,
              help="Start a local ZooKeeper (Debian's zookeeper package) instead of embedded metadata.")
@click.option("--zk-connect", default=None, metavar="HOST:PORT", help="Use this running ZooKeeper.")
@click.option("--etcd", "start_etcd", is_flag=True, default=False,
              help="Start a local etcd (Debian's etcd-server package) as the metadata store (etcd://...).")
@click.option("--demo", is_flag=True, default=False, help="Run a short write/read/recovery demo.")
@click.option("--demo-entries", type=click.IntRange(1), default=10000, show_default=True)
@click.option("--exit-after-demo", is_flag=True, default=False, help="Stop the cluster after the demo.")
@click.option("--tls", is_flag=True, default=False,
              help="Make a throwaway CA and certificates (DIR/tls) and run the bookies with mutual TLS and "
                   "role authorization; DIR/tls/client.conf has the client's keys.")
@click.option("-v", "--verbose", is_flag=True, default=False, help="Show the traceback of an error.")
def sandbox(num_bookies, data_dir, start_zk, zk_connect, start_etcd, demo, demo_entries, exit_after_demo, tls,
            verbose) -> None:
    """Start a local cluster (metadata + N bookies) and serve until Ctrl-C."""
    if sum(map(bool, (start_zk, zk_connect, start_etcd))) > 1:
        raise click.UsageError("--zk, --zk-connect and --etcd exclude each other")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    temporary = data_dir is None
    if temporary:
        data_dir = Path(tempfile.mkdtemp(prefix="bkfast-sandbox-"))
    cluster = Sandbox(data_dir, num_bookies, start_zk, zk_connect, tls=tls, etcd=start_etcd)
    signal.signal(signal.SIGTERM, _raise_stop)
    error: str | None = None
    failure: BaseException | None = None
    try:
        cluster.start()
        click.echo(f"sandbox ready: metadata {cluster.metadata_uri}")
        click.echo(f"sandbox bookies: {', '.join(b.bookie_id for b in cluster.bookies)}")
        click.echo(f"sandbox description: {data_dir / SANDBOX_FILE}")
        if tls:
            click.echo(f"sandbox TLS: mutual TLS + BookieAuthZFactory (role bkclient); CA and certificates in "
                       f"{data_dir / 'tls'}, client keys in {data_dir / 'tls' / 'client.conf'}")
        if demo:
            run_demo(cluster.metadata_uri, demo_entries, out=click.echo, client_conf=cluster.client_conf)
            click.echo("demo: done")
        if not exit_after_demo:
            click.echo("serving; press Ctrl-C to stop")
            while True:
                time.sleep(3600)
    except (KeyboardInterrupt, _Stop):
        click.echo("stopping the sandbox")
    except click.ClickException as exc:
        error, failure = exc.format_message(), exc
    except (ConfigurationError, MetadataError, BKError, OSError) as exc:
        # meant for the user (the embedded store in use, no ZooKeeper package, a full disk): one line
        error, failure = " ".join(str(exc).split()) or type(exc).__name__, exc
    finally:
        if failure is not None and verbose:
            traceback.print_exception(failure, file=sys.stderr)
        cluster.stop()
        if temporary:
            # a sandbox without --data-dir is throw-away: nothing else can reopen its temp dir
            shutil.rmtree(data_dir, ignore_errors=True)
            click.echo(f"removed {data_dir}")
    if error is not None:
        click.echo(f"Error: {error}", err=True)      # last, after the stop's log lines
        sys.exit(1)
    sys.exit(0)
