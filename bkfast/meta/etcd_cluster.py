"""A cluster's own keys on etcd, as Java's EtcdRegistrationManager writes them: `initnewcluster`, `metaformat`
(nuke), the instance id, and bookie cookies (``<scope>/cookies/<bookieId>``, the same text as in ZooKeeper;
written only where absent, or compared on the key's mod revision, Java's cookie version on etcd).

Blocking etcd calls: never in the reactor thread.
"""

from __future__ import annotations

import logging
import uuid

from bkfast.errors import ClusterExistsError, CookieError, MetadataError

from .cookies import Cookie
from .etcd_kv import EtcdKV, cmp_absent, cmp_mod_revision, op_delete, op_put
from .etcd_layout import EtcdKeys, format_etcd_layout

__all__ = ["init_new_etcd_cluster", "nuke_etcd_cluster", "read_etcd_instance_id", "EtcdCookieStore"]

log = logging.getLogger(__name__)


def init_new_etcd_cluster(kv: EtcdKV, scope: str, instance_id: str | None = None) -> str:
    """Java's initNewCluster: in one transaction, only while `<scope>` is absent, the scope key, layout,
    instance id and the empty directory keys. Returns the instance id; ClusterExistsError if the scope exists."""
    keys = EtcdKeys(scope)
    instance_id = instance_id or str(uuid.uuid4())
    puts = [op_put(keys.root, b""), op_put(keys.layout, format_etcd_layout()),
            op_put(keys.instance_id, instance_id.encode())]
    puts += [op_put(k, b"") for k in (keys.cookies_dir, keys.bookies_dir, keys.bookies(False), keys.bookies(True),
                                      keys.ledgers_dir, keys.buckets_dir, keys.underreplication_dir)]
    result = kv.txn([cmp_absent(keys.root)], puts, what=f"initialize the cluster at {scope}")
    if not result.succeeded:
        raise ClusterExistsError(f"etcd scope {scope} already exists: cluster already initialized "
                                 "(use `metaformat --force` to wipe it)")
    log.info("initialized a new cluster in etcd %s under %s (instance id %s)", kv.describe(), scope, instance_id)
    return instance_id


def nuke_etcd_cluster(kv: EtcdKV, scope: str) -> int:
    """Java's nukeExistingCluster: delete every key of the scope, refused while bookies are registered.
    Returns the number of keys deleted."""
    keys = EtcdKeys(scope)
    alive = []
    for read_only in (False, True):
        alive += kv.range(*EtcdKeys.children(keys.bookies(read_only)), keys_only=True)[0]
    if alive:
        raise MetadataError(f"bookies are still registered under {keys.bookies_dir.decode()} "
                            f"({', '.join(k.key.decode() for k in alive[:5])}): stop them before formatting")
    deleted = kv.delete(keys.root, keys.root_end)
    log.info("deleted the cluster under etcd scope %s: %d keys", scope, deleted)
    return deleted


def read_etcd_instance_id(kv: EtcdKV, scope: str) -> str | None:
    found = kv.get(EtcdKeys(scope).instance_id)
    return None if found is None else found.value.decode()


class EtcdCookieStore:
    """Cookies of one scope (bkfast.meta.cookies.CookieStore): the version is the key's mod revision."""

    store_name = "etcd"

    def __init__(self, kv: EtcdKV, scope: str):
        self.kv, self.scope, self.keys = kv, scope, EtcdKeys(scope)

    def where(self, bookie_id: str) -> str:
        return self.keys.cookie(bookie_id).decode()

    def instance_id(self) -> str | None:
        return read_etcd_instance_id(self.kv, self.scope)

    def init_hint(self) -> str:
        return f"{self.keys.instance_id.decode()} does not exist"

    def read(self, bookie_id: str) -> tuple[Cookie, int] | None:
        found = self.kv.get(self.keys.cookie(bookie_id))
        if found is None:
            return None
        try:
            return Cookie.parse(found.value), found.mod_revision
        except CookieError as e:
            raise CookieError(f"etcd cookie {self.where(bookie_id)}: {e}") from None

    def write(self, bookie_id: str, cookie: Cookie, version: int | None = None) -> int:
        key = self.keys.cookie(bookie_id)
        check = cmp_absent(key) if version is None else cmp_mod_revision(key, version)
        result = self.kv.txn([check], [op_put(key, cookie.to_bytes())], what=f"write cookie {key.decode()}")
        if not result.succeeded:
            state = "already exists (written concurrently?)" if version is None else \
                f"changed concurrently (version {version} is stale)"
            raise CookieError(f"cookie {key.decode()} {state}")
        return result.revision

    def delete(self, bookie_id: str, version: int = -1) -> bool:
        key = self.keys.cookie(bookie_id)
        if version < 0:
            return self.kv.delete(key) > 0
        return self.kv.txn([cmp_mod_revision(key, version)], [op_delete(key)], what=f"delete {key.decode()}").succeeded

    def exists(self, bookie_id: str) -> bool:
        return self.kv.get(self.keys.cookie(bookie_id)) is not None

    def registered(self, bookie_id: str) -> bool:
        return any(self.kv.get(self.keys.bookie(bookie_id, read_only)) is not None for read_only in (False, True))
