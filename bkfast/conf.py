"""Server and client configuration, with Apache BookKeeper's key names and defaults.

This module owns the reading of `bk_server.conf`-style files, the conversion and checking of values against
the key table (bkfast.conf_keys: every key bkfast understands, with name, type, default, limits and one line
of doc), and the precedence between sources:

    defaults < file < environment (`BK_<key>`) < explicit overrides (e.g. CLI `--key=value`)

Keys and defaults follow BookKeeper's `ServerConfiguration` / `ClientConfiguration` (see
spec/bookkeeper-formats.md §1.1, §4 and the client defaults after §4.7) so an operator can carry an
existing `bk_server.conf` over unchanged. Keys we do not implement are kept and listed in `unknown_keys`
rather than rejected. It imports only the stdlib, bkfast.conf_keys and bkfast.errors.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from bkfast.conf_keys import (  # the key table; re-exported: bkfast.conf is where callers find them
    CLIENT_KEYS,
    COMMON_KEYS,
    DEFAULT_DB_STORAGE_CACHE_MB,
    PLACEMENT_KEYS,
    SERVER_KEYS,
    TLS_KEYS,
    Key,
    MiB,
    is_secret_key,
    system_max_backlog,
)
from bkfast.errors import ConfigurationError

__all__ = [
    "CLIENT_KEYS",
    "COMMON_KEYS",
    "PLACEMENT_KEYS",
    "SERVER_KEYS",
    "TLS_KEYS",
    "ClientConfiguration",
    "Configuration",
    "DEFAULT_DB_STORAGE_CACHE_MB",
    "Key",
    "ServerConfiguration",
    "client_settings_of",
    "is_secret_key",
    "format_value",
    "parse_properties",
    "unknown_key_warnings",
    "log_unknown_keys",
]

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
    etcd_tls_ca_file = _Setting("etcdTlsCaFile")
    etcd_tls_cert_file = _Setting("etcdTlsCertFile")
    etcd_tls_key_file = _Setting("etcdTlsKeyFile")
    etcd_user = _Setting("etcdUser")
    etcd_password = _Setting("etcdPassword")
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
    the closest known key, one INFO line naming BookKeeper's keys that bkfast does not need, and one naming
    the rest (kept: plugins may read them). Returns the warnings."""
    from bkfast.conf_java import JAVA_SERVER_KEYS_NOT_READ

    logger = logger or logging.getLogger("bkfast.conf")
    suggestions, others = unknown_key_warnings(conf)
    for line in suggestions:
        logger.warning("%s", line)
    # BookKeeper's own keys are not "unknown": a Java bk_server.conf carried over holds them by design.
    java = [name for name in others if name in JAVA_SERVER_KEYS_NOT_READ]
    unknown = [name for name in others if name not in JAVA_SERVER_KEYS_NOT_READ]
    if java:
        logger.info("BookKeeper keys bkfast does not read (what they set is built in, absent or fixed here; "
                    "not misspellings): %s", ", ".join(java))
    if unknown:
        logger.info("keys bkfast does not read (kept for plugins): %s", ", ".join(unknown))
    return suggestions


class _PlacementSettings:
    """Accessors of the placement keys (PLACEMENT_KEYS), which clients and bookies (AutoRecovery) both read."""

    ensemble_placement_policy = _Setting("ensemblePlacementPolicy")
    repp_dns_resolver_class = _Setting("reppDnsResolverClass")
    network_topology_script_file_name = _Setting("networkTopologyScriptFileName")
    network_topology_script_number_args = _Setting("networkTopologyScriptNumberArgs")
    min_num_racks_per_write_quorum = _Setting("minNumRacksPerWriteQuorum")
    enforce_min_num_racks_per_write_quorum = _Setting("enforceMinNumRacksPerWriteQuorum")
    enforce_min_num_fault_domains_for_write = _Setting("enforceMinNumFaultDomainsForWrite")
    ignore_local_node_in_placement_policy = _Setting("ignoreLocalNodeInPlacementPolicy")
    repp_regions_to_write = _Setting("reppRegionsToWrite")
    repp_minimum_regions_for_durability = _Setting("reppMinimumRegionsForDurability")
    repp_enable_durability_enforcement_in_replace = _Setting("reppEnableDurabilityEnforcementInReplace")
    min_num_zones_per_write_quorum = _Setting("minNumZonesPerWriteQuorum")
    desired_num_zones_per_write_quorum = _Setting("desiredNumZonesPerWriteQuorum")
    enforce_strict_zoneaware_placement = _Setting("enforceStrictZoneawarePlacement")
    reorder_read_sequence_enabled = _Setting("reorderReadSequenceEnabled")
    disk_weight_based_placement_enabled = _Setting("diskWeightBasedPlacementEnabled")
    bookie_max_weight_multiple_for_weight_based_placement = _Setting("bookieMaxWeightMultipleForWeightBasedPlacement")
    get_bookie_info_interval_s = _Setting("getBookieInfoIntervalSeconds")
    get_bookie_info_retry_interval_s = _Setting("getBookieInfoRetryIntervalSeconds")


class ServerConfiguration(_PlacementSettings, Configuration):
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
    entry_log_direct_reads = _Setting("entryLogDirectReads")
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
    repaired_placement_policy_not_adhering_bookie_enable = _Setting("repairedPlacementPolicyNotAdheringBookieEnable")
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
    enable_statistics = _Setting("enableStatistics")
    stats_provider_class = _Setting("statsProviderClass")
    prometheus_stats_http_enable = _Setting("prometheusStatsHttpEnable")
    prometheus_stats_http_address = _Setting("prometheusStatsHttpAddress")
    prometheus_stats_http_port = _Setting("prometheusStatsHttpPort")
    prometheus_stats_latency_rollover_seconds = _Setting("prometheusStatsLatencyRolloverSeconds")
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
    http_server_max_request_body_bytes = _Setting("httpServerMaxRequestBodyBytes")
    http_server_max_concurrent_requests = _Setting("httpServerMaxConcurrentRequests")
    http_server_max_queued_requests = _Setting("httpServerMaxQueuedRequests")
    http_server_max_busy_share = _Setting("httpServerMaxBusyShare")

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
        if align > get("journalPreAllocSizeMB") * MiB:
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


class ClientConfiguration(_PlacementSettings, Configuration):
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


def client_settings_of(server_conf: Configuration) -> dict[str, Any]:
    """The client keys a bookie process's own ledger clients (admin API, AutoRecovery) take from its server
    configuration, as Java builds their ClientConfiguration from the ServerConfiguration: every configured
    key a client knows (TLS keys and key stores above all), except the metadata URI, passed on its own."""
    known = {key.name for key in ClientConfiguration.KEYS}
    return {name: value for name, value in server_conf.to_dict().items()
            if name in known and name != "metadataServiceUri" and value is not None}
