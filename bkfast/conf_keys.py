"""The table of every configuration key bkfast understands: name, type, default, limits and one line of
doc, with BookKeeper's names and defaults (spec/bookkeeper-formats.md §1.1, §4 and the client defaults
after §4.7). Defaults that depend on the machine (the DbLedgerStorage cache size, the listen backlog) or
on other keys (`derive`) are computed here too. bkfast.conf reads, converts and checks values against it.
It is a leaf: it imports only the stdlib.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A Configuration (bkfast.conf, which builds on this table): what `derive` functions are handed.
Configuration = Any

MiB = 1024 * 1024
GiB = 1024 * MiB


def _default_db_storage_cache_mb() -> int:
    # BookKeeper sizes each DbLedgerStorage cache at 25% of the JVM's max direct memory. There is no JVM
    # here, so 25% of physical RAM stands in for it, capped at 4 GiB of RAM so a big host does not hand a
    # single bookie gigabytes of cache it never asked for.
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        physical = 0
    if physical <= 0:
        physical = 4 * GiB
    return max(1, min(physical, 4 * GiB) // 4 // MiB)


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
    Key("zkTimeout", int, 10000, "ZooKeeper session timeout, ms; on etcd, the lease TTL and the call timeout", min=1),
    # etcd (metadataServiceUri etcd://...): bkfast's own keys, Java's etcd driver has no TLS or authentication.
    Key("etcdTlsCaFile", str, None, "CA bundle that signs the etcd servers' certificates; set = https"),
    Key("etcdTlsCertFile", str, None, "Client certificate (PEM) for etcd's client-cert authentication"),
    Key("etcdTlsKeyFile", str, None, "Private key (PEM) of etcdTlsCertFile"),
    Key("etcdUser", str, None, "etcd user name (etcd's auth enabled); with etcdPassword"),
    Key("etcdPassword", str, None, "Password of etcdUser"),
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
    Key("tlsEnabledCipherSuites", list, None,
        "Cipher suites (Java or OpenSSL names); unset = the 11 a Java bookie enables (docs/tls.md)"),
    Key("tlsEnabledProtocols", list, None, "Protocols, e.g. TLSv1.2,TLSv1.3; unset = TLSv1.3,TLSv1.2 (Java's)"),
    Key("tlsCertFilesRefreshDurationSeconds", int, 0,
        "Re-read changed key/cert/trust files for new connections this often, s; 0 = never", min=0),
)

# Ensemble placement (docs/placement.md): the same names on clients and on bookies, whose AutoRecovery picks
# replacement bookies with them (Java builds that client's configuration from the server's).
PLACEMENT_KEYS: tuple[Key, ...] = (
    Key("ensemblePlacementPolicy", str, "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
        "Placement policy (Java class name): Rackaware, RegionAware, Zoneaware or DefaultEnsemblePlacementPolicy"),
    Key("reppDnsResolverClass", str, "org.apache.bookkeeper.net.ScriptBasedMapping",
        "Where bookie locations come from: ScriptBasedMapping (networkTopologyScriptFileName), or Pulsar's "
        "org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping (the /bookies rack table)"),
    Key("networkTopologyScriptFileName", str, None,
        "Script that prints one /rack (or /region/rack, /zone/upgradedomain) per host name argument; "
        "unset = every bookie in the default rack"),
    Key("networkTopologyScriptNumberArgs", int, 100, "Host names passed to one run of the topology script",
        min=1),
    Key("minNumRacksPerWriteQuorum", int, 2, "Racks every write quorum should span (at most its size)", min=1),
    Key("enforceMinNumRacksPerWriteQuorum", bool, False,
        "Fail ledger creation and ensemble changes that cannot meet minNumRacksPerWriteQuorum (else fall back)"),
    Key("enforceMinNumFaultDomainsForWrite", bool, False,
        "Acknowledge an add only once its acknowledgements come from minNumRacksPerWriteQuorum racks"),
    Key("ignoreLocalNodeInPlacementPolicy", bool, False,
        "Do not prefer the client's own rack for the first bookie of an ensemble"),
    Key("reppRegionsToWrite", str, None,
        "Region-aware: the regions to place ledgers in, separated by ';'; unset = every region with bookies"),
    Key("reppMinimumRegionsForDurability", int, 2,
        "Region-aware: an acknowledged entry is on at least this many regions", min=0),
    Key("reppEnableDurabilityEnforcementInReplace", bool, True,
        "Region-aware: keep reppMinimumRegionsForDurability when replacing a bookie"),
    Key("minNumZonesPerWriteQuorum", int, 2, "Zone-aware: zones every write quorum must span", min=1),
    Key("desiredNumZonesPerWriteQuorum", int, 3, "Zone-aware: zones every write quorum should span", min=1),
    Key("enforceStrictZoneawarePlacement", bool, True,
        "Zone-aware: refuse placements below minNumZonesPerWriteQuorum (and bookies in the default zone)"),
    Key("reorderReadSequenceEnabled", bool, False,
        "Read from bookies of the client's own rack/region first, read-only, slow and gone bookies last"),
    Key("diskWeightBasedPlacementEnabled", bool, False,
        "Choose bookies with a probability by their free disk space (from GET_BOOKIE_INFO)"),
    Key("bookieMaxWeightMultipleForWeightBasedPlacement", int, 3,
        "A bookie's disk weight is at most this multiple of the median weight; <= 0 = no cap"),
    Key("getBookieInfoIntervalSeconds", int, 86400,
        "With diskWeightBasedPlacementEnabled, ask the bookies their free space this often, s", min=1),
    Key("getBookieInfoRetryIntervalSeconds", int, 60,
        "With diskWeightBasedPlacementEnabled, ask again this soon after a bookie did not answer, s", min=1),
)

SERVER_KEYS: tuple[Key, ...] = TLS_KEYS + PLACEMENT_KEYS + (
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
    Key("entryLogDirectReads", bool, True, "bkfast: read read-ahead runs of entry logs with O_DIRECT, "
        "bypassing the page cache (buffered where the file system refuses it)"),
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
    Key("repairedPlacementPolicyNotAdheringBookieEnable", bool, False,
        "The placement check marks ledgers that break the placement policy; workers move replicas to fix them"),
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
    Key("numAddWorkerThreads", int, 1, "Add worker threads: 1 = a socket read's adds are split and stored "
        "on add-worker-0, 0 = on the network thread (more run as 1); unset = 1 with 4+ cores to run on, else 0",
        min=0),
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
    Key("httpServerMaxRequestBodyBytes", int, 64 * 1024,
        "bkfast: largest admin request body; a larger declared body is refused (413) before it is read, "
        "and a body needing credentials it lacks is refused (401) before it is read", min=0, max=64 * MiB),
    Key("httpServerMaxConcurrentRequests", int, 2,
        "bkfast: admin API requests handled at once (the rest wait in a queue): bounds the CPU an admin "
        "request flood takes from the data path", min=1, max=64),
    Key("httpServerMaxQueuedRequests", int, 64,
        "bkfast: admin API requests waiting for a handler; beyond them a request is answered 503 with "
        "Retry-After", min=0, max=100_000),
    Key("httpServerMaxBusyShare", float, 0.1,
        "bkfast: the share of time the admin API's handlers may be busy on average (wall time, summed over "
        "those running at once); a request that ran longer delays the next one accordingly",
        min=0.01, max=64.0),
    Key("enableStatistics", bool, True, "Record stats (off: the stats provider records nothing)"),
    Key("statsProviderClass", str, "org.apache.bookkeeper.stats.NullStatsProvider",
        "Stats provider: org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider serves Java's "
        "metric names on prometheusStatsHttpPort (set in conf/bk_server.conf, as Pulsar's conf does); "
        "NullStatsProvider records nothing"),
    Key("prometheusStatsHttpEnable", bool, True, "Serve /metrics on prometheusStatsHttpPort (Prometheus provider)"),
    Key("prometheusStatsHttpAddress", str, "0.0.0.0", "Bind address of the Prometheus /metrics port"),
    Key("prometheusStatsHttpPort", int, 8000, "Port of the Prometheus /metrics endpoint (0: the kernel picks)",
        min=0, max=65535),
    Key("prometheusStatsLatencyRolloverSeconds", int, 60,
        "Latency quantiles are those of the last window of this many seconds", min=1, max=86400),
)

CLIENT_KEYS: tuple[Key, ...] = TLS_KEYS + PLACEMENT_KEYS + (
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


_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential", "jaas", "sasl")
_SECRET_FILE_KEYS = frozenset(k.lower() for k in (
    "tlsKeyStore", "clientKeyStore", "httpServerKeystorePath",
    "tlsTrustStore", "clientTrustStore", "httpServerTrustStorePath"))


def is_secret_key(name: str) -> bool:
    """Whether a configuration key's value must never leave the process (admin API, logs): passwords,
    tokens and the files that hold keys. Decided by name, so an unknown key a Java conf carries over
    (e.g. a SASL password) is covered too."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) or lowered in _SECRET_FILE_KEYS
