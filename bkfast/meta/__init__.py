"""Cluster metadata in ZooKeeper: layout/init/format, bookie registration, cookies (spec §5).

The error classes and `split_bookie_id` are defined in `bkfast.errors` / `bkfast.ids` and re-exported here.
Metadata drivers: the interface is `bkfast.meta.driver`, `bkfast.meta.factory` builds one for a URI.
"""

from bkfast.errors import (
    BookieIdInUseError,
    ClusterExistsError,
    CookieError,
    CookieMismatchError,
    MetadataError,
)
from bkfast.ids import split_bookie_id

from .cookies import (
    COOKIE_LAYOUT_VERSION,
    Cookie,
    bookie_dirs,
    check_local_cookies,
    check_or_create_cookies,
    cookie_for_conf,
    delete_zk_cookie,
    format_bookie,
    read_cookie_file,
    read_zk_cookie,
    write_cookie_file,
    write_zk_cookie,
)
from .registration import (
    SCOPE_IDS_PROPERTY,
    BookieRegistration,
    bookie_id,
    bookie_service_info,
)
from .zk_layout import (
    MANAGER_FACTORIES,
    LedgerLayout,
    format_layout,
    format_metadata,
    init_new_cluster,
    metadata_from_conf,
    parse_layout,
    parse_metadata_service_uri,
    read_instance_id,
    read_layout,
    zk_path,
)

__all__ = [
    "COOKIE_LAYOUT_VERSION", "Cookie", "CookieError", "CookieMismatchError", "bookie_dirs",
    "check_local_cookies", "check_or_create_cookies", "cookie_for_conf", "delete_zk_cookie", "format_bookie",
    "read_cookie_file",
    "read_zk_cookie", "write_cookie_file", "write_zk_cookie",
    "SCOPE_IDS_PROPERTY", "BookieIdInUseError", "BookieRegistration", "bookie_id", "bookie_service_info",
    "split_bookie_id",
    "MANAGER_FACTORIES", "ClusterExistsError", "LedgerLayout", "MetadataError", "format_layout",
    "format_metadata", "init_new_cluster", "metadata_from_conf", "parse_layout", "parse_metadata_service_uri",
    "read_instance_id",
    "read_layout", "zk_path",
]
