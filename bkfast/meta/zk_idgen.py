"""Ledger id generation in ZooKeeper (spec §5.2): Java's ZkLedgerIdGenerator and, once short ids
overflow, LongZkLedgerIdGenerator (`idgen-long/HOB-<high>/ID-<low>`, the 3 newest HOB dirs kept).

A mixin of `ZkMetadataDriver`: it runs in the driver's thread pool and uses the driver's bounded,
retried `_call`, its kazoo client, root, layout and `short_id_limit`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from bkfast.errors import BKLedgerIdOverflowException, BKZKException

from .zk_layout import IDGEN, zk_path

if TYPE_CHECKING:
    from kazoo.client import KazooClient

__all__ = ["ZkIdGeneration", "IDGEN_LONG"]

log = logging.getLogger(__name__)

IDGEN_LONG = "idgen-long"
_HOB = re.compile(r"HOB-(\d+)")


def _log_failed_delete(path: str, level: int = logging.WARNING):
    def done(ar):
        try:
            ar.get_nowait()
        except NoNodeError:
            pass
        except Exception as e:
            log.log(level, "deleting %s failed: %r", path, e)
    return done


class ZkIdGeneration:
    """Blocking id generation; the driver wraps `_generate_blocking` in its thread pool."""

    # The host driver's (ZkMetadataDriver): declared here, set and defined there.
    root: str
    layout: str
    short_id_limit: int
    _idgen_lock: threading.Lock
    _long_ids: bool | None
    _hobs: list[str] | None
    _zk: Callable[[], KazooClient]
    _call: Callable[..., Any]

    def _generate_blocking(self) -> int:
        with self._idgen_lock:
            if self.layout == "flat":
                lid = self._sequence_id(zk_path(self.root, IDGEN, "ID-"))
                if lid is None:
                    raise BKLedgerIdOverflowException(f"ledger ids under {zk_path(self.root, IDGEN)} reached "
                                                      f"{self.short_id_limit} and the flat layout has no long ids")
                return lid
            long_path = zk_path(self.root, IDGEN_LONG)
            if self._long_ids is None:
                self._long_ids = self._call(f"exists {long_path}", self._zk().exists_async, long_path) is not None
            if not self._long_ids:
                lid = self._sequence_id(zk_path(self.root, IDGEN, "ID-"))
                if lid is not None:
                    return lid
                log.info("short ledger ids overflowed at %d; switching to %s", self.short_id_limit, long_path)
                try:
                    self._call(f"create {long_path}", self._zk().create_async, long_path, b"", makepath=True)
                except NodeExistsError:
                    pass
                self._long_ids = True
            return self._long_id(long_path)

    def _sequence_id(self, prefix: str) -> int | None:
        """ZkLedgerIdGenerator: an ephemeral-sequential node, deleted right away; None on overflow."""
        created = self._call(f"create {prefix}", self._zk().create_async, prefix, b"",
                             ephemeral=True, sequence=True, makepath=True)
        self._zk().delete_async(created).rawlink(_log_failed_delete(created))
        try:
            seq = int(created[len(prefix):])
        except ValueError:
            raise BKZKException(f"id generator node {created} has no sequence number") from None
        return seq if 0 <= seq < self.short_id_limit else None

    def _long_id(self, gen_path: str) -> int:
        """LongZkLedgerIdGenerator: id = (high << 32) | low, low from ``HOB-<high>/ID-`` sequences."""
        for _ in range(64):
            refreshed = False
            if self._hobs is None:
                self._hobs = self._call(f"children {gen_path}", self._zk().get_children_async, gen_path)
                refreshed = True
            highs = sorted(int(m.group(1)) for m in map(_HOB.fullmatch, self._hobs) if m)
            if not highs:
                self._hobs = None
                if refreshed:
                    self._create_hob(gen_path, 1)
                continue
            high = highs[-1]
            low = self._sequence_id(f"{gen_path}/HOB-{high:010d}/ID-")
            if len(highs) > 3:                          # keep the 3 newest HOB directories
                self._hobs = None
                for old in highs[:-3]:
                    self._zk().delete_async(f"{gen_path}/HOB-{old:010d}", version=0).rawlink(
                        _log_failed_delete(f"{gen_path}/HOB-{old:010d}", logging.DEBUG))
            if low is None:
                if high + 1 >= 2**31:
                    raise BKLedgerIdOverflowException(f"ledger id space exhausted under {gen_path}")
                self._create_hob(gen_path, high + 1)
                continue
            return (high << 32) | low
        raise BKZKException(f"could not generate a long ledger id under {gen_path}")

    def _create_hob(self, gen_path: str, high: int) -> None:
        path = f"{gen_path}/HOB-{high:010d}"
        log.info("ledger id generator: new high-order directory %s", path)
        try:
            self._call(f"create {path}", self._zk().create_async, path, b"", makepath=True)
        except NodeExistsError:
            pass
        self._hobs = None

