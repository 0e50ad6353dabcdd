"""A real cluster for client tests: a real ZooKeeper (the session fixture) and a fresh ledgers root in it, or a
real etcd and a fresh scope in it (`store="etcd"`, Java's etcd layout), and N `bkfast bookie` subprocesses that
check cookies and register themselves, stopped by pid (N may be 0: an initialized cluster without bookies).
Test modules get one through tests.cluster_factory."""

from __future__ import annotations

import uuid
from pathlib import Path

from kazoo.client import KazooClient

from bkfast.cli.local_cluster import LocalBookie, free_port, start_bookies
from bkfast.meta import zk_layout
from tests.waiting import wait_until


class Cluster:
    def __init__(self, zk_connect: str, data_dir: Path | None, bookies: int, store: str = "zk", **bookie_conf: str):
        """`zk_connect`: ZooKeeper's host:port, or etcd's when `store` is "etcd"."""
        self.zk_connect = zk_connect
        self.store = store
        self.zk: KazooClient | None = None
        self.kv = None
        if store == "etcd":
            self._init_etcd(zk_connect)
        else:
            self.root = f"/bk-{uuid.uuid4().hex[:12]}/ledgers"
            self.metadata_uri = f"zk+hierarchical://{zk_connect}{self.root}"
            self.zk = KazooClient(hosts=zk_connect, timeout=15.0)
            self.zk.start(timeout=30)
            zk_layout.init_new_cluster(self.zk, self.root)
        self.bookies: list[LocalBookie] = []
        for attempt in range(2 if bookies else 0):
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

    def _init_etcd(self, endpoint: str) -> None:
        from bkfast.meta.etcd_cluster import init_new_etcd_cluster
        from bkfast.meta.etcd_driver import etcd_client_from_conf

        self.root = f"/bk-{uuid.uuid4().hex[:12]}"
        self.metadata_uri = f"etcd://{endpoint}{self.root}"
        self.kv = etcd_client_from_conf(self.metadata_uri)
        init_new_etcd_cluster(self.kv, self.root)

    def registered(self, read_only: bool = False) -> list[str]:
        """The writable (or read-only) bookies registered: under available/ in ZooKeeper, bookies/writable/
        in etcd."""
        if self.kv is not None:
            from bkfast.meta.etcd_layout import EtcdKeys

            start, end = EtcdKeys.children(EtcdKeys(self.root).bookies(read_only))
            return [kv.key[len(start):].decode() for kv in self.kv.range(start, end, keys_only=True)[0]]
        assert self.zk is not None
        if read_only:
            return self.zk.get_children(f"{self.root}/available/readonly")
        return [c for c in self.zk.get_children(f"{self.root}/available") if c != "readonly"]

    def wait_registered(self, count: int, timeout: float = 30.0) -> None:
        try:
            wait_until(f"{count} bookies registered under {self.root}",
                       lambda: len(self.registered()) >= count, timeout, 0.1)
        except AssertionError as err:
            raise AssertionError(f"{err}; registered: {self.registered()}") from None

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
        if self.kv is not None:
            from bkfast.meta.etcd_layout import EtcdKeys

            keys = EtcdKeys(self.root)
            try:
                self.kv.delete(keys.root, keys.root_end)
            finally:
                self.kv.close()
            return
        assert self.zk is not None
        try:
            self.zk.delete(self.root.rsplit("/", 1)[0], recursive=True)
        finally:
            self.zk.stop()
            self.zk.close()
