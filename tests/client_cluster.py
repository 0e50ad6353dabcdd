"""A real cluster for client tests: a real ZooKeeper (the session fixture), a fresh ledgers root, and
N `bkfast bookie` subprocesses that check cookies and register themselves, stopped by pid."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port, start_bookies
from bkfast.meta import zk_layout


class Cluster:
    def __init__(self, zk_connect: str, data_dir: Path, bookies: int, **bookie_conf: str):
        self.root = f"/bk-{uuid.uuid4().hex[:12]}/ledgers"
        self.metadata_uri = f"zk+hierarchical://{zk_connect}{self.root}"
        self.zk = KazooClient(hosts=zk_connect, timeout=15.0)
        self.zk.start(timeout=30)
        zk_layout.init_new_cluster(self.zk, self.root)
        for attempt in range(2):
            self.bookies = [LocalBookie(data_dir / f"try{attempt}" / f"bookie-{i}", free_port(), self.metadata_uri,
                                        {"journalMaxGroupWaitMSec": "1", **bookie_conf})
                            for i in range(bookies)]
            try:
                start_bookies(self.bookies)
                break
            except RuntimeError as err:
                # A port chosen free can be taken before the bookie binds it; the second try uses new
                # ports (and new dirs: a bookie's cookie names its port).
                if attempt == 1:
                    raise
                print(f"cluster start failed, retrying with new ports: {err}")
        self.wait_registered(len(self.bookies))

    def wait_registered(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            children = [c for c in self.zk.get_children(f"{self.root}/available") if c != "readonly"]
            if len(children) >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"only {children} registered, expected {count}")
            time.sleep(0.1)

    def by_id(self, bookie_id: str) -> LocalBookie:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def ensure_all_running(self) -> None:
        dead = [b for b in self.bookies if not b.alive()]
        if dead:
            start_bookies(dead)
            self.wait_registered(len(self.bookies))

    def stop(self) -> None:
        for bookie in self.bookies:
            try:
                bookie.stop(timeout_s=20)
            except Exception:
                bookie.kill()
        try:
            self.zk.delete(self.root.rsplit("/", 1)[0], recursive=True)
        finally:
            self.zk.stop()
            self.zk.close()
