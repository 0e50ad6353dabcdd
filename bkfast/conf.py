"""Server and client configuration, with Apache BookKeeper's key names and defaults.

This module owns the table of every configuration key bkfast understands (name, type, default, limits,
one line of doc), the reading of `bk_server.conf`-style files, and the precedence between sources:

    defaults < file < environment (`BK_<key>`) < explicit overrides (e.g. CLI `--key=value`)

Keys and defaults follow BookKeeper's `ServerConfiguration` / `ClientConfiguration` (see
spec/bookkeeper-formats.md §1.1, §4 and the client defaults after §4.7) so an operator can carry an
existing `bk_server.conf` over unchanged. Keys we do not implement are kept and listed in `unknown_keys`
rather than rejected. It is a leaf: it imports only the stdlib and bkfast.errors.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from bkfast.errors import ConfigurationError

__all__ = [
    "CLIENT_KEYS",
    "COMMON_KEYS",
    "SERVER_KEYS",
    "TLS_KEYS",
    "ClientConfiguration",
    "Configuration",
    "DEFAULT_DB_STORAGE_CACHE_MB",
    "Key",
    "ServerConfiguration",
    "format_value",
    "parse_properties",
    "unknown_key_warnings",
    "log_unknown_keys",
]

_MiB = 1024 * 1024
_GiB = 1024 * _MiB


def _default_db_storage_cache_mb() -> int:
    # BookKeeper sizes each DbLedgerStorage cache at 25% of the JVM's max direct memory. There is no JVM
    # here, so 25% of physical RAM stands in for it, capped at 4 GiB of RAM so a big host does not hand a
    # single bookie gigabytes of cache it never asked for.
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        physical = 0
    if physical <= 0:
        physical = 4 * _GiB
    return max(1, min(physical, 4 * _GiB) // 4 // _MiB)


DEFAULT_DB_STORAGE_CACHE_MB = _default_db_storage_cache_mb()

SOMAXCONN_PATH = "/proc/sys/net/core/somaxconn"
FALLBACK_BACKLOG = 4096     # Linux's SOMAXCONN since 5.4, where /proc cannot be read


def system_max_backlog() -> int:
    """The kernel's cap on a listen backlog (net.core.somaxconn), as netty's NetUtil.SOMAXCONN reads it."""
    try:
        with open(SOMAXCONN_PATH) as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return FALLBACK_BACKLOG
    return value if value > 0 else FALLBACK_BACKLOG
"""Default of dbStorage_writeCacheMaxSizeMb and dbStorage_readAheadCacheMaxSizeMb on this host."""


@dataclass(frozen=True)
class Key:
    """One configuration key. `type` is int, float, bool, str or list (a list of strings).

    `default` None with no `derive` means the key is optional (unset unless configured). `derive`
    computes the default from other keys, as Java's `getX(KEY, getY())` getters do.
    """

    name: str
    type: type
    default: Any
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    derive: Callable[[Configuration], Any] | None = None

    @property
    def optional(self) -> bool:
        return self.default is None and self.derive is None


def _same_as(other: str) -> Callable[[Configuration], Any]:
    return lambda conf: conf.get(other)


def _list_of(other: str) -> Callable[[Configuration], Any]:
    return lambda conf: [conf.get(other)]


def _uri_from_zk_servers(conf: Configuration) -> str:
    # Java falls back to the legacy zkServers + zkLedgersRootPath pair when metadataServiceUri is unset;
    # old bk_server.conf files only have those, and must keep pointing at the same cluster.
    servers = conf.get("zkServers")
    if not servers:
        return _DEFAULT_METADATA_SERVICE_URI
    return f"zk+hierarchical://{servers.replace(',', ';')}{conf.get('zkLedgersRootPath')}"


_DEFAULT_METADATA_SERVICE_URI = "zk+hierarchical://localhost:2181/ledgers"

# --- the key tables ---------------------------------------------------------------------------------

COMMON_KEYS: tuple[Key, ...] = (
    Key("metadataServiceUri", str, _DEFAULT_METADATA_SERVICE_URI,
        "Metadata store URI; unset with zkServers set = zk+hierarchical://<zkServers><zkLedgersRootPath>",
        derive=_uri_from_zk_servers),
    Key("zkServers", str, None, "Legacy ZooKeeper connect string (host:port,...); prefer metadataServiceUri"),
    Key("zkLedgersRootPath", str, "/ledgers", "Legacy ZooKeeper root of the ledger tree"),
    Key("zkTimeout", int, 10000, "ZooKeeper session timeout, ms", min=1),
    Key("nettyMaxFrameSizeBytes", int, 5242880, "Largest frame on the wire, with its 4-byte length", min=1),
)

# TLS (spec §8.3): the same names on bookies and clients.
TLS_KEYS: tuple[Key, ...] = (
    Key("tlsProviderFactoryClass", str, None,
        "org.apache.bookkeeper.tls.TLSContextFactory turns TLS on (START_TLS); unset = off"),
    Key("tlsProvider", str, "OpenSSL", "OpenSSL or JDK; bkfast always uses OpenSSL (pyOpenSSL)",
        choices=("OpenSSL", "JDK")),
    Key("tlsClientAuthentication", bool, False,
        "Bookie: require a client certificate; client: present one (tlsKeyStore)"),
    Key("tlsKeyStoreType", str, "JKS", "PEM or PKCS12 (JKS is refused: convert it with keytool)",
        choices=("JKS", "PEM", "PKCS12")),
    Key("tlsKeyStore", str, None, "Private key (PEM, PKCS#8) or PKCS12 store"),
    Key("tlsKeyStorePasswordPath", str, None, "File holding the key (store) password"),
    Key("tlsCertificatePath", str, None, "PEM certificate chain of the key (PEM key stores)"),
    Key("tlsTrustStoreType", str, "JKS", "PEM or PKCS12", choices=("JKS", "PEM", "PKCS12")),
    Key("tlsTrustStore", str, None, "CA certificates to trust (PEM or PKCS12)"),
    Key("tlsTrustStorePasswordPath", str, None, "File holding the trust store password (PKCS12)"),
    Key("tlsEnabledCipherSuites", list, None, "Cipher suites (Java or OpenSSL names); unset = OpenSSL's"),
    Key("tlsEnabledProtocols", list, None, "Protocols, e.g. TLSv1.2,TLSv1.3; unset = OpenSSL's"),
    Key("tlsCertFilesRefreshDurationSeconds", int, 0,
        "Re-read changed key/cert/trust files for new connections this often, s; 0 = never", min=0),
)

SERVER_KEYS: tuple[Key, ...] = TLS_KEYS + (
    Key("bookieAuthProviderFactoryClass", str, None,
        "org.apache.bookkeeper.tls.BookieAuthZFactory: only clients whose certificate OU names a role of "
        "authorizedRoles may use the bookie; unset = no authentication"),
    Key("authorizedRoles", list, None, "Roles (first OU role `0:<role>`) BookieAuthZFactory lets in"),
    Key("tlsHandshakeTimeoutMs", int, 10000,
        "bkfast: close a connection whose TLS handshake has not finished this long after START_TLS "
        "(Netty's fixed 10 s in Java), ms", min=1),
    # Network and identity
    Key("bookiePort", int, 3181, "Port the bookie listens on", min=0, max=65535),
    Key("allowEphemeralPorts", bool, False, "Allow bookiePort=0 (a random port; for tests)"),
    Key("listeningInterface", str, None, "Network interface (lo, eth0) whose IPv4 address the bookie binds "
        "and, without advertisedAddress, advertises; unset = bind every interface"),
    Key("advertisedAddress", str, None, "Address advertised to clients instead of the interface's"),
    Key("useHostNameAsBookieID", bool, False, "Build the default bookie id from the host name, not the IP"),
    Key("useShortHostName", bool, False, "With useHostNameAsBookieID, use the host name up to its first dot"),
    Key("bookieId", str, None, "Explicit bookie id (default host:port)"),
    Key("serverTcpNoDelay", bool, True, "Set TCP_NODELAY on bookie connections"),
    Key("serverTcpBacklog", int, 0,
        "Accept backlog of the bookie's listening socket; 0 = the system maximum "
        "(/proc/sys/net/core/somaxconn, as Java's netty server uses)", min=0),
    # Directories
    Key("journalDirectory", str, "/tmp/bk-txn", "Journal directory (used when journalDirectories is unset)"),
    Key("journalDirectories", list, None,
        "Journal directories, one journal each (a ledger's: ledgerId mod count); unset = [journalDirectory]",
        derive=_list_of("journalDirectory")),
    Key("ledgerDirectories", list, ["/tmp/bk-data"], "Entry log (and by default index) directories"),
    Key("indexDirectories", list, None, "Index directories; unset = ledgerDirectories (is_set tells which)",
        derive=_same_as("ledgerDirectories")),
    Key("allowMultipleDirsUnderSameDiskPartition", bool, True, "Allow several directories on one partition"),
    # Journal (spec §4.2)
    Key("journalFormatVersionToWrite", int, 6, "Journal format version of new journal files", min=4, max=6),
    Key("journalAlignmentSize", int, 512, "Journal flushes are padded to this many bytes (multiple of 512)",
        min=512),
    Key("journalPreAllocSizeMB", int, 16, "Journal files grow in steps of this many MB", min=1),
    Key("journalMaxSizeMB", int, 2048, "Roll to a new journal file past this size, MB", min=1),
    Key("journalMaxBackups", int, 5, "Old journal files kept after they are no longer needed", min=0),
    Key("journalReuseFiles", bool, False, "Reuse old journal files instead of deleting them"),
    Key("journalMaxGroupWaitMSec", int, 2, "Longest wait to group a commit, ms; <= 0 flushes when idle"),
    Key("journalBufferedWritesThreshold", int, 524288, "Flush a group once this many bytes wait", min=0),
    Key("journalBufferedEntriesThreshold", int, 0, "Flush a group once this many entries wait; 0 = off",
        min=0),
    Key("journalFlushWhenQueueEmpty", bool, False, "Flush as soon as the journal queue is empty"),
    Key("journalAdaptiveGroupWrites", bool, True, "Group journal writes (group commit)"),
    Key("journalSyncData", bool, True, "fsync the journal before acknowledging adds"),
    Key("journalPageCacheFlushIntervalMSec", int, 1000, "Page cache flush interval when not syncing, ms",
        min=0),
    Key("journalWriteBufferSizeKB", int, 64, "Journal write buffer, KB", min=1),
    Key("journalQueueSize", int, 10000, "Capacity of the journal's request queue", min=1),
    Key("journalRemoveFromPageCache", bool, True, "Drop journal pages from the page cache after sync"),
    # Not a BookKeeper key. On by default (measured): the kernel's copy of each batch into the page cache
    # was ~1/4 of a bookie's CPU with 16 KiB adds, and open-loop tails and one-at-a-time latency did not
    # get worse (README, Bookie storage).
    Key("journalDirectWrites", bool, True, "bkfast: write journal batches with O_DIRECT (buffered where "
        "the file system refuses it)"),
    Key("numJournalCallbackThreads", int, 1, "Threads completing journal callbacks", min=0),
    Key("journalWriteData", bool, True, "Write entry data to the journal (false: only ledger storage)"),
    Key("skipInvalidJournalRecord", bool, False, "On replay, skip malformed journal records, not fail"),
    # Entry logs (spec §4.4)
    Key("logSizeLimit", int, 1073741824, "Roll to a new entry log past this size, bytes", min=1,
        max=1073741824),
    Key("entryLogFilePreallocationEnabled", bool, True, "Create the next entry log ahead of time"),
    Key("readBufferSizeBytes", int, 512, "Entry log read buffer, bytes", min=1),
    Key("writeBufferSizeBytes", int, 65536, "Entry log write buffer, bytes", min=1),
    # Not a BookKeeper key. On by default (measured, 16 KiB adds): bookie CPU per add 20-28 us vs 28-69 us
    # through the page cache, throughput equal or higher (README, Bookie storage).
    Key("entryLogDirectWrites", bool, True, "bkfast: write entry logs with O_DIRECT (buffered where the "
        "file system refuses it)"),
    Key("flushEntrylogBytes", int, 0, "Flush an entry log every this many bytes; 0 = only at checkpoints",
        min=0),
    Key("entryLogPerLedgerEnabled", bool, False, "One active entry log per ledger"),
    # Ledger storage (spec §4.5, §4.6)
    Key("ledgerStorageClass", str, "org.apache.bookkeeper.bookie.SortedLedgerStorage",
        "Ledger storage implementation (Java class name)"),
    Key("skipListSizeLimit", int, 67108864, "SortedLedgerStorage memtable size, bytes", min=1,
        max=(2**31 - 2) // 2),
    Key("pageSize", int, 8192, "Index page size, bytes", min=8),
    Key("pageLimit", int, -1, "Index pages kept in memory; <= 0 = derived from memory"),
    Key("openFileLimit", int, 20000, "Index files kept open (file-based index storage)", min=1),
    Key("fileInfoFormatVersionToWrite", int, 1, "Index file header version of new index files", min=0, max=1),
    Key("dbStorage_writeCacheMaxSizeMb", int, DEFAULT_DB_STORAGE_CACHE_MB,
        "DbLedgerStorage write cache, MB (Java: 25% of max direct memory; here 25% of min(RAM, 4 GiB))",
        min=1),
    Key("dbStorage_readAheadCacheMaxSizeMb", int, DEFAULT_DB_STORAGE_CACHE_MB,
        "DbLedgerStorage read-ahead cache, MB (Java: 25% of max direct memory; here 25% of min(RAM, 4 GiB))",
        min=0),
    Key("dbStorage_readAheadCacheBatchSize", int, 100, "Entries read ahead per cache miss", min=1),
    Key("dbStorage_readAheadCacheBatchBytesSize", int, -1, "Bytes read ahead per cache miss; <= 0 = off"),
    Key("dbStorage_rocksDB_blockCacheSize", int, None, "RocksDB block cache, bytes; unset = storage decides",
        min=0),
    Key("dbStorage_maxThrottleTimeMs", int, 10000,
        "How long an add waits for a write-cache flush when both halves are full, ms", min=0),
    # Checkpoints, garbage collection, compaction (spec §4.7)
    Key("flushInterval", int, 10000, "Checkpoint (ledger storage flush) interval, ms", min=1),
    Key("gcWaitTime", int, 600000, "Garbage collection interval, ms", min=1),
    Key("minorCompactionThreshold", float, 0.2, "Compact entry logs below this live fraction (minor)",
        max=1.0),
    Key("minorCompactionInterval", int, 3600, "Minor compaction interval, s; <= 0 = off"),
    Key("majorCompactionThreshold", float, 0.8, "Compact entry logs below this live fraction (major)",
        max=1.0),
    Key("majorCompactionInterval", int, 86400, "Major compaction interval, s; <= 0 = off"),
    Key("minorCompactionMaxTimeMillis", int, -1, "Longest minor compaction run, ms; <= 0 = unbounded"),
    Key("majorCompactionMaxTimeMillis", int, -1, "Longest major compaction run, ms; <= 0 = unbounded"),
    Key("compactionRate", int, 1000, "Compaction throttle, entries/s"),
    Key("compactionRateByBytes", int, 1000000, "Compaction throttle, bytes/s (when isThrottleByBytes)"),
    Key("isThrottleByBytes", bool, False, "Throttle compaction by bytes instead of entries"),
    Key("entryLocationCompactionInterval", int, -1, "DbLedgerStorage location index compaction; -1 = off"),
    Key("gcOverreplicatedLedgerWaitTime", int, 86400000, "Interval of the over-replicated ledger GC, ms"),
    # Replication and auditor
    Key("openLedgerRereplicationGracePeriod", int, 30000, "Wait before re-replicating an open ledger, ms"),
    Key("auditorPeriodicCheckInterval", int, 604800, "Auditor full ledger check interval, s; 0 = off", min=0),
    Key("auditorPeriodicBookieCheckInterval", int, 86400, "Auditor bookie check interval, s; 0 = off", min=0),
    Key("auditorPeriodicPlacementPolicyCheckInterval", int, 0, "Auditor placement check interval, s; 0 = off",
        min=0),
    Key("auditorPeriodicReplicasCheckInterval", int, 0, "Auditor replicas check interval, s; 0 = off", min=0),
    Key("auditorLedgerVerificationPercentage", int, 0, "Percent of a fragment's entries the auditor reads",
        min=0, max=100),
    Key("lostBookieRecoveryDelay", int, 0, "Wait before recovering a lost bookie's ledgers, s", min=0),
    Key("rwRereplicateBackoffMs", int, 5000, "Back-off after a failed re-replication, ms", min=0),
    Key("underreplicatedLedgerRecoveryGracePeriod", int, 0,
        "Report ledgers under-replicated for longer than this, s; 0 = off", min=0),
    Key("autoRecoveryDaemonEnabled", bool, False, "Run the auto-recovery daemon inside the bookie"),
    Key("replicationRateByBytes", int, -1, "Re-replication throttle, bytes/s; -1 = unlimited"),
    Key("lockReleaseOfFailedLedgerGracePeriod", int, 300000,
        "Longest wait before a worker releases the lock of a ledger it failed to replicate, ms", min=0),
    Key("storeSystemTimeAsLedgerUnderreplicatedMarkTime", bool, True, "Write ctime into under-replication marks"),
    # Disks
    Key("forceReadOnlyBookie", bool, False, "Start the bookie read-only (adds refused unless recovery)"),
    Key("readOnlyModeEnabled", bool, True, "Turn read-only instead of shutting down when disks fill"),
    Key("diskUsageThreshold", float, 0.95, "A disk above this used fraction is full", min=0.0, max=1.0),
    Key("diskUsageWarnThreshold", float, 0.90, "Warn above this used fraction", min=0.0, max=1.0),
    Key("diskUsageLwmThreshold", float, None,
        "A full disk is writable again below this; unset = diskUsageThreshold (as in Java)",
        min=0.0, max=1.0, derive=_same_as("diskUsageThreshold")),
    Key("diskCheckInterval", int, 10000, "Disk usage check interval, ms", min=1),
    # Request processing
    Key("numAddWorkerThreads", int, 1, "Add request threads; 0 = handle on the network thread", min=0),
    Key("numReadWorkerThreads", int, 8, "Read request threads; 0 = handle on the network thread", min=0),
    Key("maxPendingAddRequestsPerThread", int, 10000, "Queued adds per add thread before rejecting", min=0),
    Key("maxPendingReadRequestsPerThread", int, 10000, "Queued reads per read thread before rejecting",
        min=0),
    Key("waitTimeoutOnResponseBackpressureMs", int, 60000,
        "Close a connection whose peer has not read its answers for this long, ms; -1 = never (Java's "
        "default is -1; bkfast closes after 60 s so a client that never reads cannot pin a connection)",
        min=-1),
    Key("testEntryLogReadDelayMs", int, 0,
        "bkfast test hook: sleep this long before each DbLedgerStorage entry-log read (never in production)",
        min=0),
    Key("testWriteCacheFlushDelayMs", int, 0,
        "bkfast test hook: sleep this long before each write-cache flush (never in production)", min=0),
    Key("serverConnectionOutputLimitBytes", int, 1024 * 1024,
        "bkfast: answers queued per connection before it stops taking requests until the peer reads "
        "(plus Twisted's 256 KiB send buffer)", min=4096),
    # Operations
    Key("httpServerEnabled", bool, False, "Serve the admin HTTP API"),
    Key("httpServerPort", int, 8080, "Admin HTTP API port", min=0, max=65535),
    Key("httpServerHost", str, None,
        "Admin HTTP API bind address; unset = listeningInterface's, or every interface (Java: 0.0.0.0)"),
    Key("httpServerTlsEnable", bool, False, "Serve the admin HTTP API over TLS (HTTPS)"),
    Key("httpServerKeystorePath", str, None, "HTTPS key: a PKCS12 store, or a PEM file with key and chain"),
    Key("httpServerKeystorePassword", str, None, "Password of httpServerKeystorePath"),
    Key("httpServerTrustStorePath", str, None,
        "CA certificates (PEM or PKCS12) of admin clients: set, HTTPS asks for a client certificate and "
        "one it trusts may use mutating endpoints"),
    Key("httpServerTrustStorePassword", str, None, "Password of httpServerTrustStorePath (PKCS12)"),
    Key("httpServerAuthTokenFile", str, None,
        "bkfast: file holding a bearer token that mutating admin endpoints require "
        "(Authorization: Bearer <token>)"),
    Key("httpServerAuthRequired", bool, None,
        "bkfast: mutating admin endpoints need a token or a trusted client certificate; unset = true when "
        "httpServerAuthTokenFile or httpServerTrustStorePath is set",
        derive=lambda conf: bool(conf.get("httpServerAuthTokenFile") or conf.get("httpServerTrustStorePath"))),
    Key("httpServerReadOnlyOpen", bool, True,
        "bkfast: read-only admin endpoints (/heartbeat, /metrics, GETs) need no authentication"),
)

CLIENT_KEYS: tuple[Key, ...] = TLS_KEYS + (
    Key("tlsHostnameVerificationEnabled", bool, False,
        "Check that the bookie's certificate names the address connected to"),
    Key("startTLSTimeoutSecs", int, 10, "Time for START_TLS and the TLS handshake, s", min=1),
    Key("clientKeyStoreType", str, None, "Deprecated override of tlsKeyStoreType",
        choices=("JKS", "PEM", "PKCS12")),
    Key("clientKeyStore", str, None, "Deprecated override of tlsKeyStore"),
    Key("clientKeyStorePasswordPath", str, None, "Deprecated override of tlsKeyStorePasswordPath"),
    Key("clientTrustStoreType", str, None, "Deprecated override of tlsTrustStoreType",
        choices=("JKS", "PEM", "PKCS12")),
    Key("clientTrustStore", str, None, "Deprecated override of tlsTrustStore"),
    Key("clientTrustStorePasswordPath", str, None, "Deprecated override of tlsTrustStorePasswordPath"),
    Key("useV2WireProtocol", bool, False,
        "Talk the v2 binary protocol instead of v3 protobuf (bkfast's client uses v2 unless this is set)"),
    Key("readTimeout", int, 5, "Request timeout, s", min=0),
    Key("addEntryTimeoutSec", int, None, "Add timeout, s; unset = readTimeout", min=0,
        derive=_same_as("readTimeout")),
    Key("readEntryTimeoutSec", int, None, "Read timeout, s; unset = readTimeout", min=0,
        derive=_same_as("readTimeout")),
    Key("speculativeReadTimeout", int, 2000, "Ask the next replica after this long, ms; 0 = off", min=0),
    Key("recoveryReadBatchSize", int, 1, "Entries read per batch during ledger recovery", min=1),
    Key("enableParallelRecoveryRead", bool, False, "Read recovery entries from all replicas at once"),
    Key("explicitLacInterval", int, 0, "Explicit LAC write interval; 0 = off", min=0),
    Key("numChannelsPerBookie", int, 1, "Connections per bookie", min=1),
    Key("throttle", int, 5000, "Adds per second per ledger handle, as Java's LedgerHandle rate limiter "
        "(adds beyond it wait for their permit, in order); 0 = no limit", min=0),
    Key("clientConnectTimeoutMillis", int, 10000, "Bookie connect timeout, ms", min=0),
    Key("storeSystemtimeAsLedgerCreationTime", bool, False, "Store ctime in ledger metadata"),
    Key("digestType", str, "CRC32", "Digest of new ledgers", choices=("CRC32", "MAC", "CRC32C", "DUMMY")),
    Key("enableDigestTypeAutodetection", bool, True, "Take the digest type from the ledger's metadata"),
    Key("ledgerMetadataVersion", int, -1, "Metadata format version to write; -1 = current (3)",
        min=-1, max=3),
)

# --- value conversion -------------------------------------------------------------------------------

_TRUE_WORDS = frozenset({"true", "yes", "1"})
_FALSE_WORDS = frozenset({"false", "no", "0"})
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_EXPECTED = {
    int: "an integer",
    float: "a number",
    bool: "a boolean (true/false/yes/no/1/0)",
    str: "a string",
    list: "a comma-separated list",
}


def _bad(key: Key, value: object) -> ConfigurationError:
    return ConfigurationError(f"{key.name}: expected {_EXPECTED[key.type]}, got {value!r}")


def _convert(key: Key, value: object) -> Any:
    """Turn a raw value (text from a file/env/CLI, or a Python value) into the key's type, checked."""
    if key.type is bool:
        if isinstance(value, bool):
            return value
        word = value.strip().lower() if isinstance(value, str) else None
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        raise _bad(key, value)

    if key.type is list:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value):
            return [part.strip() for part in value]
        raise _bad(key, value)

    if key.type is str:
        if not isinstance(value, str):
            raise _bad(key, value)
        text = value.strip()
        if key.choices is not None and text not in key.choices:
            raise ConfigurationError(f"{key.name}: expected one of {', '.join(key.choices)}, got {value!r}")
        return text

    # Numbers. bool is an int subclass and is never a sensible number of milliseconds.
    number: int | float
    if key.type is int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            raise _bad(key, value)
    else:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            number = float(value.strip())
        else:
            raise _bad(key, value)
        if not math.isfinite(number):
            raise _bad(key, value)
    if key.min is not None and number < key.min:
        raise ConfigurationError(f"{key.name}: {number} is below the minimum {key.min}")
    if key.max is not None and number > key.max:
        raise ConfigurationError(f"{key.name}: {number} is above the maximum {key.max}")
    return number


def format_value(value: Any) -> str:
    """The text form of a value, as it would appear in a bk_server.conf (the inverse of _convert)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(part) for part in value)
    return str(value)


# --- bk_server.conf files ---------------------------------------------------------------------------

_KEY_VALUE = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)", re.DOTALL)


def _continues(line: str) -> bool:
    # An odd number of trailing backslashes continues the line; an even number is escaped backslashes.
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Parse Java-properties text into (line number, key, value) in file order.

    Handles `#`/`!` comment lines, blank lines, `key=value`, `key: value` and `key value`, whitespace
    around key and value, and trailing-backslash line continuation. Other backslash escapes are kept as
    written (bk_server.conf files do not use them). A key that appears twice is reported twice.
    """
    lines = text.splitlines()
    entries: list[tuple[int, str, str]] = []
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # Continuation is resolved before anything else: a continued line starting with '#' is content.
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip()
            i += 1
        match = _KEY_VALUE.fullmatch(line)
        assert match is not None  # the pattern matches any string
        key, value = match.group(1), match.group(2).strip()
        if key:
            entries.append((lineno, key, value))
    return entries


# --- configuration objects --------------------------------------------------------------------------


class _Setting:
    """A read-only attribute for one key: `conf.journal_max_group_wait_ms` reads journalMaxGroupWaitMSec."""

    def __init__(self, key: str):
        self.key = key
        self.attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = name

    def __get__(self, conf: Configuration | None, owner: type | None = None) -> Any:
        if conf is None:
            return self
        return conf.get(self.key)

    def __set__(self, conf: Configuration, value: Any) -> None:
        raise AttributeError(f"{self.attr} is read-only; use set({self.key!r}, value)")


_MISSING = object()


class Configuration:
    """Key/value configuration with typed, validated values. Subclasses choose the keys (`KEYS`).

    Construct from a dict of overrides (values may be text, as from a CLI, or Python values), or use
    `load()` to layer defaults, a file, the environment and overrides. Keys not in `KEYS` are kept
    verbatim and listed in `unknown_keys`.
    """

    KEYS: ClassVar[tuple[Key, ...]] = COMMON_KEYS
    _BY_NAME: ClassVar[dict[str, Key]]

    metadata_service_uri = _Setting("metadataServiceUri")
    zk_servers = _Setting("zkServers")
    zk_ledgers_root_path = _Setting("zkLedgersRootPath")
    zk_timeout_ms = _Setting("zkTimeout")
    netty_max_frame_size_bytes = _Setting("nettyMaxFrameSizeBytes")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _index_keys(cls)

    def __init__(self, overrides: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = {}
        self._unknown: dict[str, Any] = {}
        if overrides:
            self.update(overrides)

    # -- building --

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] = os.environ,
    ) -> Self:
        """Defaults < the file at `path` (if any) < `BK_<key>` variables in `env` < `overrides`.

        Only variables naming a key of this class are read: deployment scripts set other BK_* variables
        (BK_HOME, ...) that are not configuration. Call `validate()` on the result before using it.
        """
        conf = cls()
        if path is not None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for lineno, name, value in parse_properties(text):
                conf._set(name, value, source=f"{os.fspath(path)}:{lineno}")
        for key in cls.KEYS:
            var = f"BK_{key.name}"
            if var in env:
                conf._set(key.name, env[var], source=f"environment variable {var}")
        if overrides:
            conf.update(overrides)
        return conf

    def set(self, name: str, value: Any) -> None:
        """Set one key; None (or empty text, for an optional or derived key) returns it to its default."""
        self._set(name, value, source=None)

    def update(self, overrides: Mapping[str, Any]) -> None:
        for name, value in overrides.items():
            self._set(name, value, source=None)

    def _set(self, name: str, value: Any, source: str | None) -> None:
        key = self._BY_NAME.get(name)
        if key is None:
            self._unknown[name] = value
            return
        blank = isinstance(value, str) and not value.strip()
        if value is None or (blank and (key.default is None or key.derive is not None)):
            self._values.pop(name, None)
            return
        try:
            self._values[name] = _convert(key, value)
        except ConfigurationError as e:
            if source is None:
                raise
            raise ConfigurationError(f"{e} (from {source})") from None

    # -- reading --

    def get(self, name: str, default: Any = _MISSING) -> Any:
        """The value of a key: as configured, else its default. Unknown keys give their raw value.

        A name that is neither a key of this class nor configured raises KeyError unless `default` is
        given, so a typo in code does not silently read None.
        """
        key = self._BY_NAME.get(name)
        if key is None:
            if name in self._unknown:
                return self._unknown[name]
            if default is not _MISSING:
                return default
            raise KeyError(f"{name!r} is not a {type(self).__name__} key")
        if name in self._values:
            value = self._values[name]
        elif key.derive is not None:
            value = key.derive(self)
        else:
            value = key.default
        return list(value) if isinstance(value, list) else value

    def is_set(self, name: str) -> bool:
        """True if the key was configured (by file, environment or override) rather than defaulted."""
        return name in self._values or name in self._unknown

    @property
    def unknown_keys(self) -> list[str]:
        """Configured keys this class does not know, in the order they were first seen (for warnings)."""
        return list(self._unknown)

    @classmethod
    def key_info(cls, name: str) -> Key:
        return cls._BY_NAME[name]

    @classmethod
    def accessors(cls) -> dict[str, str]:
        """snake_case attribute -> BookKeeper key, for every typed accessor of this class."""
        out: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, _Setting):
                    out[attr] = value.key
        return out

    # -- checking --

    def validate(self) -> Self:
        """Check rules that involve several keys (single values are checked when set). Returns self."""
        problems = self._problems()
        if problems:
            raise ConfigurationError(f"invalid {type(self).__name__}: " + "; ".join(problems))
        return self

    def _problems(self) -> list[str]:
        return []

    # -- writing --

    def to_dict(self, include_defaults: bool = False) -> dict[str, Any]:
        """Configured values (and unknown keys, raw); with `include_defaults`, every known key's value."""
        out: dict[str, Any] = {}
        for key in self.KEYS:
            if include_defaults or key.name in self._values:
                out[key.name] = self.get(key.name)
        out.update(self._unknown)
        return out

    def dump(self, include_defaults: bool = False) -> str:
        """`key=value` text that `load()` reads back to an equal configuration."""
        lines = [
            f"{name}={format_value(value)}"
            for name, value in self.to_dict(include_defaults).items()
            if value is not None
        ]
        return "".join(line + "\n" for line in lines)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_dict(include_defaults=True) == other.to_dict(include_defaults=True)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


def _index_keys(cls: type[Configuration]) -> None:
    by_name: dict[str, Key] = {}
    for key in cls.KEYS:
        if key.name in by_name:
            raise TypeError(f"{cls.__name__}: key {key.name} is declared twice")
        if key.default is not None:
            _convert(key, key.default)  # a default outside its own limits is a bug in the table
        by_name[key.name] = key
    cls._BY_NAME = by_name
    for attr, key_name in cls.accessors().items():
        if key_name not in by_name:
            raise TypeError(f"{cls.__name__}.{attr} refers to unknown key {key_name}")


_index_keys(Configuration)


_CLOSE_MATCH_CUTOFF = 0.85
"""How alike (difflib ratio) an unknown key and a known one must be to suggest the known one. High, so
that the many Java keys bkfast does not implement (statsProviderClass, ...) get no false suggestion,
while a typo (journalDirectores) still does."""


def unknown_key_warnings(conf: Configuration) -> tuple[list[str], list[str]]:
    """(one warning per unknown key that looks like a misspelled known key, the other unknown keys).

    A warning reads "journalDirectores is not a key bkfast reads; did you mean journalDirectories?".
    Case-insensitive equality counts as a misspelling. BookKeeper's own keys that bkfast does not read
    (bkfast.conf_java) are never taken for misspellings. The other unknown keys are kept for plugins.
    """
    from bkfast.conf_java import JAVA_SERVER_KEYS_NOT_READ

    known = [key.name for key in conf.KEYS]
    by_lower = {name.lower(): name for name in known}
    real = JAVA_SERVER_KEYS_NOT_READ | {key.name for key in COMMON_KEYS + SERVER_KEYS + CLIENT_KEYS}
    suggestions, others = [], []
    for name in conf.unknown_keys:
        match = None if name in real else by_lower.get(name.lower())
        if match is None and name not in real:
            close = difflib.get_close_matches(name, known, n=1, cutoff=_CLOSE_MATCH_CUTOFF)
            match = close[0] if close else None
        if match is None:
            others.append(name)
        else:
            suggestions.append(f"{name} is not a key bkfast reads; did you mean {match}?")
    return suggestions, others


def log_unknown_keys(conf: Configuration, logger: logging.Logger | None = None) -> list[str]:
    """Log the configuration's unknown keys once (call at start): a WARNING per likely misspelling, with
    the closest known key, and one INFO line naming the rest (kept: plugins may read them). Returns the
    warnings."""
    logger = logger or logging.getLogger("bkfast.conf")
    suggestions, others = unknown_key_warnings(conf)
    for line in suggestions:
        logger.warning("%s", line)
    if others:
        logger.info("keys bkfast does not read (kept for plugins): %s", ", ".join(others))
    return suggestions


class ServerConfiguration(Configuration):
    """A bookie's configuration (BookKeeper's ServerConfiguration)."""

    KEYS = COMMON_KEYS + SERVER_KEYS

    # Network and identity
    bookie_port = _Setting("bookiePort")
    allow_ephemeral_ports = _Setting("allowEphemeralPorts")
    listening_interface = _Setting("listeningInterface")
    advertised_address = _Setting("advertisedAddress")
    use_host_name_as_bookie_id = _Setting("useHostNameAsBookieID")
    use_short_host_name = _Setting("useShortHostName")
    bookie_id = _Setting("bookieId")
    server_tcp_no_delay = _Setting("serverTcpNoDelay")
    server_tcp_backlog = _Setting("serverTcpBacklog")
    # Directories
    journal_directory = _Setting("journalDirectory")
    journal_directories = _Setting("journalDirectories")
    ledger_directories = _Setting("ledgerDirectories")
    index_directories = _Setting("indexDirectories")
    allow_multiple_dirs_under_same_disk_partition = _Setting("allowMultipleDirsUnderSameDiskPartition")
    # Journal
    journal_format_version_to_write = _Setting("journalFormatVersionToWrite")
    journal_alignment_size = _Setting("journalAlignmentSize")
    journal_pre_alloc_size_mb = _Setting("journalPreAllocSizeMB")
    journal_max_size_mb = _Setting("journalMaxSizeMB")
    journal_max_backups = _Setting("journalMaxBackups")
    journal_reuse_files = _Setting("journalReuseFiles")
    journal_max_group_wait_ms = _Setting("journalMaxGroupWaitMSec")
    journal_buffered_writes_threshold = _Setting("journalBufferedWritesThreshold")
    journal_buffered_entries_threshold = _Setting("journalBufferedEntriesThreshold")
    journal_adaptive_group_writes = _Setting("journalAdaptiveGroupWrites")
    journal_sync_data = _Setting("journalSyncData")
    journal_page_cache_flush_interval_ms = _Setting("journalPageCacheFlushIntervalMSec")
    journal_write_buffer_size_kb = _Setting("journalWriteBufferSizeKB")
    journal_queue_size = _Setting("journalQueueSize")
    journal_remove_from_page_cache = _Setting("journalRemoveFromPageCache")
    journal_direct_writes = _Setting("journalDirectWrites")
    num_journal_callback_threads = _Setting("numJournalCallbackThreads")
    journal_write_data = _Setting("journalWriteData")
    skip_invalid_journal_record = _Setting("skipInvalidJournalRecord")
    # Entry logs
    log_size_limit = _Setting("logSizeLimit")
    entry_log_file_preallocation_enabled = _Setting("entryLogFilePreallocationEnabled")
    read_buffer_size_bytes = _Setting("readBufferSizeBytes")
    write_buffer_size_bytes = _Setting("writeBufferSizeBytes")
    flush_entrylog_bytes = _Setting("flushEntrylogBytes")
    entry_log_direct_writes = _Setting("entryLogDirectWrites")
    entry_log_per_ledger_enabled = _Setting("entryLogPerLedgerEnabled")
    # Ledger storage
    ledger_storage_class = _Setting("ledgerStorageClass")
    skip_list_size_limit = _Setting("skipListSizeLimit")
    page_size = _Setting("pageSize")
    page_limit = _Setting("pageLimit")
    open_file_limit = _Setting("openFileLimit")
    file_info_format_version_to_write = _Setting("fileInfoFormatVersionToWrite")
    db_storage_write_cache_max_size_mb = _Setting("dbStorage_writeCacheMaxSizeMb")
    db_storage_read_ahead_cache_max_size_mb = _Setting("dbStorage_readAheadCacheMaxSizeMb")
    db_storage_read_ahead_cache_batch_size = _Setting("dbStorage_readAheadCacheBatchSize")
    db_storage_read_ahead_cache_batch_bytes_size = _Setting("dbStorage_readAheadCacheBatchBytesSize")
    db_storage_rocksdb_block_cache_size = _Setting("dbStorage_rocksDB_blockCacheSize")
    db_storage_max_throttle_time_ms = _Setting("dbStorage_maxThrottleTimeMs")
    # Checkpoints, garbage collection, compaction
    flush_interval_ms = _Setting("flushInterval")
    gc_wait_time_ms = _Setting("gcWaitTime")
    minor_compaction_threshold = _Setting("minorCompactionThreshold")
    minor_compaction_interval_s = _Setting("minorCompactionInterval")
    major_compaction_threshold = _Setting("majorCompactionThreshold")
    major_compaction_interval_s = _Setting("majorCompactionInterval")
    minor_compaction_max_time_ms = _Setting("minorCompactionMaxTimeMillis")
    major_compaction_max_time_ms = _Setting("majorCompactionMaxTimeMillis")
    compaction_rate = _Setting("compactionRate")
    compaction_rate_by_bytes = _Setting("compactionRateByBytes")
    is_throttle_by_bytes = _Setting("isThrottleByBytes")
    entry_location_compaction_interval = _Setting("entryLocationCompactionInterval")
    gc_overreplicated_ledger_wait_time_ms = _Setting("gcOverreplicatedLedgerWaitTime")
    # Replication and auditor
    open_ledger_rereplication_grace_period_ms = _Setting("openLedgerRereplicationGracePeriod")
    auditor_periodic_check_interval_s = _Setting("auditorPeriodicCheckInterval")
    auditor_periodic_bookie_check_interval_s = _Setting("auditorPeriodicBookieCheckInterval")
    auditor_periodic_placement_policy_check_interval_s = _Setting(
        "auditorPeriodicPlacementPolicyCheckInterval"
    )
    auditor_periodic_replicas_check_interval_s = _Setting("auditorPeriodicReplicasCheckInterval")
    auditor_ledger_verification_percentage = _Setting("auditorLedgerVerificationPercentage")
    lost_bookie_recovery_delay_s = _Setting("lostBookieRecoveryDelay")
    rw_rereplicate_backoff_ms = _Setting("rwRereplicateBackoffMs")
    underreplicated_ledger_recovery_grace_period_s = _Setting("underreplicatedLedgerRecoveryGracePeriod")
    auto_recovery_daemon_enabled = _Setting("autoRecoveryDaemonEnabled")
    replication_rate_by_bytes = _Setting("replicationRateByBytes")
    lock_release_of_failed_ledger_grace_period_ms = _Setting("lockReleaseOfFailedLedgerGracePeriod")
    store_system_time_as_ledger_underreplicated_mark_time = _Setting("storeSystemTimeAsLedgerUnderreplicatedMarkTime")
    # Disks
    force_read_only_bookie = _Setting("forceReadOnlyBookie")
    read_only_mode_enabled = _Setting("readOnlyModeEnabled")
    disk_usage_threshold = _Setting("diskUsageThreshold")
    disk_usage_warn_threshold = _Setting("diskUsageWarnThreshold")
    disk_usage_lwm_threshold = _Setting("diskUsageLwmThreshold")
    disk_check_interval_ms = _Setting("diskCheckInterval")
    # Request processing
    num_add_worker_threads = _Setting("numAddWorkerThreads")
    num_read_worker_threads = _Setting("numReadWorkerThreads")
    max_pending_add_requests_per_thread = _Setting("maxPendingAddRequestsPerThread")
    max_pending_read_requests_per_thread = _Setting("maxPendingReadRequestsPerThread")
    wait_timeout_on_response_backpressure_ms = _Setting("waitTimeoutOnResponseBackpressureMs")
    server_connection_output_limit_bytes = _Setting("serverConnectionOutputLimitBytes")
    test_entry_log_read_delay_ms = _Setting("testEntryLogReadDelayMs")
    test_write_cache_flush_delay_ms = _Setting("testWriteCacheFlushDelayMs")
    # Operations
    http_server_enabled = _Setting("httpServerEnabled")
    http_server_port = _Setting("httpServerPort")
    tls_provider_factory_class = _Setting("tlsProviderFactoryClass")
    tls_provider = _Setting("tlsProvider")
    tls_client_authentication = _Setting("tlsClientAuthentication")
    tls_key_store_type = _Setting("tlsKeyStoreType")
    tls_key_store = _Setting("tlsKeyStore")
    tls_key_store_password_path = _Setting("tlsKeyStorePasswordPath")
    tls_certificate_path = _Setting("tlsCertificatePath")
    tls_trust_store_type = _Setting("tlsTrustStoreType")
    tls_trust_store = _Setting("tlsTrustStore")
    tls_trust_store_password_path = _Setting("tlsTrustStorePasswordPath")
    tls_enabled_cipher_suites = _Setting("tlsEnabledCipherSuites")
    tls_enabled_protocols = _Setting("tlsEnabledProtocols")
    tls_cert_files_refresh_duration_seconds = _Setting("tlsCertFilesRefreshDurationSeconds")
    bookie_auth_provider_factory_class = _Setting("bookieAuthProviderFactoryClass")
    authorized_roles = _Setting("authorizedRoles")
    tls_handshake_timeout_ms = _Setting("tlsHandshakeTimeoutMs")
    http_server_host = _Setting("httpServerHost")
    http_server_tls_enable = _Setting("httpServerTlsEnable")
    http_server_keystore_path = _Setting("httpServerKeystorePath")
    http_server_keystore_password = _Setting("httpServerKeystorePassword")
    http_server_trust_store_path = _Setting("httpServerTrustStorePath")
    http_server_trust_store_password = _Setting("httpServerTrustStorePassword")
    http_server_auth_token_file = _Setting("httpServerAuthTokenFile")
    http_server_auth_required = _Setting("httpServerAuthRequired")
    http_server_read_only_open = _Setting("httpServerReadOnlyOpen")

    @property
    def journal_flush_when_queue_empty(self) -> bool:
        """journalFlushWhenQueueEmpty as the journal applies it.

        Java's Journal forces it on when journalMaxGroupWaitMSec <= 0 (otherwise nothing would ever end a
        group); `get("journalFlushWhenQueueEmpty")` still returns the value as configured.
        """
        return bool(self.get("journalFlushWhenQueueEmpty")) or self.get("journalMaxGroupWaitMSec") <= 0

    @property
    def listen_backlog(self) -> int:
        """The accept backlog to listen with: serverTcpBacklog, or when 0 the system maximum."""
        configured = self.get("serverTcpBacklog")
        return configured if configured > 0 else system_max_backlog()

    def _problems(self) -> list[str]:
        # The rules of Java's ServerConfiguration.validate(), DiskChecker and GarbageCollectorThread, so a
        # configuration Java would refuse is refused here too, and with the same reasoning.
        problems = super()._problems()
        get = self.get

        align = get("journalAlignmentSize")
        if align % 512:
            problems.append(f"journalAlignmentSize: {align} is not a multiple of 512")
        if align > get("journalPreAllocSizeMB") * _MiB:
            problems.append(
                f"journalPreAllocSizeMB: {get('journalPreAllocSizeMB')} MB is smaller than "
                f"journalAlignmentSize ({align} bytes)"
            )
        if get("bookiePort") == 0 and not get("allowEphemeralPorts"):
            problems.append("bookiePort: 0 (an ephemeral port) needs allowEphemeralPorts=true")
        if (get("journalFormatVersionToWrite") >= 6) != (get("fileInfoFormatVersionToWrite") >= 1):
            problems.append(
                "journalFormatVersionToWrite >= 6 and fileInfoFormatVersionToWrite >= 1 go together "
                "(both are needed to persist explicit LAC)"
            )
        if not get("journalDirectories"):
            problems.append("journalDirectories: at least one journal directory is needed")
        if not get("ledgerDirectories"):
            problems.append("ledgerDirectories: at least one ledger directory is needed")

        threshold = get("diskUsageThreshold")
        if not 0.0 < threshold < 1.0:
            problems.append(f"diskUsageThreshold: {threshold} must be above 0 and below 1")
        if get("diskUsageWarnThreshold") > threshold:
            problems.append(
                f"diskUsageWarnThreshold: {get('diskUsageWarnThreshold')} is above "
                f"diskUsageThreshold {threshold}"
            )
        if get("diskUsageLwmThreshold") > threshold:
            problems.append(
                f"diskUsageLwmThreshold: {get('diskUsageLwmThreshold')} is above "
                f"diskUsageThreshold {threshold}"
            )

        problems.extend(self._compaction_problems())
        return problems

    def _compaction_problems(self) -> list[str]:
        get = self.get
        problems = []
        gc_wait_ms = get("gcWaitTime")
        enabled = {}
        for kind in ("minor", "major"):
            interval_s = get(f"{kind}CompactionInterval")
            enabled[kind] = interval_s > 0 and get(f"{kind}CompactionThreshold") > 0
            if enabled[kind] and interval_s * 1000 < gc_wait_ms:
                problems.append(
                    f"{kind}CompactionInterval: {interval_s} s is shorter than gcWaitTime ({gc_wait_ms} ms)"
                )
        if enabled["minor"] and enabled["major"] and (
            get("minorCompactionInterval") >= get("majorCompactionInterval")
            or get("minorCompactionThreshold") >= get("majorCompactionThreshold")
        ):
            problems.append(
                "minor compaction must run more often and with a lower threshold than major compaction "
                f"(minor: {get('minorCompactionThreshold')}, {get('minorCompactionInterval')} s; "
                f"major: {get('majorCompactionThreshold')}, {get('majorCompactionInterval')} s)"
            )
        return problems


class ClientConfiguration(Configuration):
    """A ledger client's configuration (BookKeeper's ClientConfiguration)."""

    KEYS = COMMON_KEYS + CLIENT_KEYS

    use_v2_wire_protocol = _Setting("useV2WireProtocol")
    read_timeout_s = _Setting("readTimeout")
    add_entry_timeout_s = _Setting("addEntryTimeoutSec")
    read_entry_timeout_s = _Setting("readEntryTimeoutSec")
    speculative_read_timeout_ms = _Setting("speculativeReadTimeout")
    recovery_read_batch_size = _Setting("recoveryReadBatchSize")
    enable_parallel_recovery_read = _Setting("enableParallelRecoveryRead")
    explicit_lac_interval = _Setting("explicitLacInterval")
    num_channels_per_bookie = _Setting("numChannelsPerBookie")
    throttle = _Setting("throttle")
    client_connect_timeout_ms = _Setting("clientConnectTimeoutMillis")
    store_systemtime_as_ledger_creation_time = _Setting("storeSystemtimeAsLedgerCreationTime")
    digest_type = _Setting("digestType")
    enable_digest_type_autodetection = _Setting("enableDigestTypeAutodetection")
    ledger_metadata_version = _Setting("ledgerMetadataVersion")
