"""A bookie stops on SIGTERM even when the kernel delivers the signal to one of its other threads.

Python runs signal handlers in the main thread, which in a bookie sits in the reactor's epoll_wait; a
signal taken by another thread (the kernel may pick any thread that does not block it) only sets a
flag, and an idle reactor with no timer due never looked at it: found as a bookie that ignored SIGTERM
for 30 s in CI. The harness sends SIGTERM to a thread of its own with pthread_kill, so the main thread
is not interrupted, deterministically."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.server_support import REPO

HARNESS = textwrap.dedent("""
    import signal, sys, threading, time
    from bkfast.conf import ServerConfiguration
    from bkfast.server import BookieService

    data = sys.argv[1]
    conf = ServerConfiguration({
        "journalDirectories": [data + "/journal"], "ledgerDirectories": [data + "/ledgers"],
        "bookiePort": 0, "listeningInterface": "127.0.0.1", "advertisedAddress": "127.0.0.1",
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "dbStorage_writeCacheMaxSizeMb": 8, "dbStorage_readAheadCacheMaxSizeMb": 8})

    def signal_from_another_thread():
        time.sleep(3.0)                              # the bookie is up and its reactor idle
        print("sending", flush=True)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=signal_from_another_thread, daemon=True).start()
    sys.exit(BookieService(conf, use_metadata=False).run())
""")


def test_sigterm_taken_by_another_thread_still_stops_the_bookie(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith(b"bookie listening on "), proc.stderr.read()[-3000:]
        assert proc.stdout.readline() == b"sending\n"
        sent = time.monotonic()
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            raise AssertionError("the bookie did not stop within 15 s of SIGTERM") from None
        assert code == 0, proc.stderr.read()[-3000:]
        assert time.monotonic() - sent < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
