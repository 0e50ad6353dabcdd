"""Configuration: BookKeeper key names and defaults, bk_server.conf files, precedence and validation."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkfast.conf import (
    DEFAULT_DB_STORAGE_CACHE_MB,
    ClientConfiguration,
    Configuration,
    ServerConfiguration,
    parse_properties,
)
from bkfast.errors import BKIncorrectParameterException, ConfigurationError

REALISTIC_BK_SERVER_CONF = """\
#/**
# * Licensed to the Apache Software Foundation (ASF) ...
# */

## Bookie settings
bookiePort=3182
# advertisedAddress=
!allowLoopback=false
useHostNameAsBookieID = true

#############################################################################
## Journal settings
#############################################################################
journalDirectories=/mnt/journal1, /mnt/journal2
journalMaxGroupWaitMSec=5
journalSyncData=FALSE
journalAdaptiveGroupWrites: yes

ledgerDirectories=/mnt/data1,\\
    /mnt/data2
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
dbStorage_writeCacheMaxSizeMb=512
diskUsageThreshold=0.97
diskUsageWarnThreshold=0.95

statsProviderClass=org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider
prometheusStatsHttpPort=8000
# keys bkfast does not implement, carried over from a Java deployment
codahaleStatsPrefix=bk
zkEnableSecurity=false

metadataServiceUri=zk+hierarchical://zk1:2181;zk2:2181/ledgers
"""


def write_conf(tmp_path, text):
    path = tmp_path / "bk_server.conf"
    path.write_text(text)
    return path


# --- defaults ---------------------------------------------------------------------------------------

SPEC_SERVER_DEFAULTS = {
    # §1.1, §4.1, §5.1
    "nettyMaxFrameSizeBytes": 5242880,
    "bookiePort": 3181,
    "journalDirectory": "/tmp/bk-txn",
    "ledgerDirectories": ["/tmp/bk-data"],
    "zkLedgersRootPath": "/ledgers",
    "zkTimeout": 10000,
    "metadataServiceUri": "zk+hierarchical://localhost:2181/ledgers",
    "useHostNameAsBookieID": False,
    # §4.2
    "journalFormatVersionToWrite": 6,
    "journalAlignmentSize": 512,
    "journalPreAllocSizeMB": 16,
    "journalMaxSizeMB": 2048,
    "journalMaxBackups": 5,
    "journalReuseFiles": False,
    "journalMaxGroupWaitMSec": 2,
    "journalBufferedWritesThreshold": 524288,
    "journalBufferedEntriesThreshold": 0,
    "journalFlushWhenQueueEmpty": False,
    "journalAdaptiveGroupWrites": True,
    "journalSyncData": True,
    "journalPageCacheFlushIntervalMSec": 1000,
    "journalWriteBufferSizeKB": 64,
    "journalQueueSize": 10000,
    "journalRemoveFromPageCache": True,
    "numJournalCallbackThreads": 1,
    "journalWriteData": True,
    # §4.4, §4.5, §4.6
    "logSizeLimit": 1073741824,
    "entryLogFilePreallocationEnabled": True,
    "readBufferSizeBytes": 512,
    "writeBufferSizeBytes": 65536,
    "flushEntrylogBytes": 0,
    "entryLogPerLedgerEnabled": False,
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "skipListSizeLimit": 67108864,
    "pageSize": 8192,
    "pageLimit": -1,
    "fileInfoFormatVersionToWrite": 1,
    "dbStorage_readAheadCacheBatchSize": 100,
    "dbStorage_readAheadCacheBatchBytesSize": -1,
    # §4.7
    "flushInterval": 10000,
    "gcWaitTime": 600000,
    "minorCompactionThreshold": 0.2,
    "minorCompactionInterval": 3600,
    "majorCompactionThreshold": 0.8,
    "majorCompactionInterval": 86400,
    "minorCompactionMaxTimeMillis": -1,
    "majorCompactionMaxTimeMillis": -1,
    "compactionRate": 1000,
    "compactionRateByBytes": 1000000,
    "isThrottleByBytes": False,
    "entryLocationCompactionInterval": -1,
    "gcOverreplicatedLedgerWaitTime": 86400000,
    "openLedgerRereplicationGracePeriod": 30000,
    "auditorPeriodicCheckInterval": 604800,
    "auditorPeriodicBookieCheckInterval": 86400,
    "auditorPeriodicPlacementPolicyCheckInterval": 0,
    "auditorLedgerVerificationPercentage": 0,
    "lostBookieRecoveryDelay": 0,
    "rwRereplicateBackoffMs": 5000,
    "underreplicatedLedgerRecoveryGracePeriod": 0,
    "readOnlyModeEnabled": True,
    "diskUsageThreshold": 0.95,
    "diskUsageWarnThreshold": 0.90,
    "diskCheckInterval": 10000,
    "numAddWorkerThreads": 1,
    "numReadWorkerThreads": 8,
    "maxPendingAddRequestsPerThread": 10000,
    "maxPendingReadRequestsPerThread": 10000,
    "serverTcpNoDelay": True,
    "httpServerEnabled": False,
    "httpServerPort": 8080,
    "autoRecoveryDaemonEnabled": False,
    "allowMultipleDirsUnderSameDiskPartition": True,
}

SPEC_CLIENT_DEFAULTS = {
    "useV2WireProtocol": False,
    "readTimeout": 5,
    "speculativeReadTimeout": 2000,
    "recoveryReadBatchSize": 1,
    "enableParallelRecoveryRead": False,
    "explicitLacInterval": 0,
    "numChannelsPerBookie": 1,
    "throttle": 5000,
    "clientConnectTimeoutMillis": 10000,
    "storeSystemtimeAsLedgerCreationTime": False,
    "digestType": "CRC32",
    "enableDigestTypeAutodetection": True,
    "ledgerMetadataVersion": -1,
    "nettyMaxFrameSizeBytes": 5242880,
    "zkTimeout": 10000,
}


@pytest.mark.parametrize(("key", "expected"), sorted(SPEC_SERVER_DEFAULTS.items()))
def test_server_default_matches_the_spec(key, expected):
    value = ServerConfiguration().get(key)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(("key", "expected"), sorted(SPEC_CLIENT_DEFAULTS.items()))
def test_client_default_matches_the_spec(key, expected):
    value = ClientConfiguration().get(key)
    assert value == expected
    assert type(value) is type(expected)


def test_every_default_is_within_its_own_limits_and_validates():
    assert ServerConfiguration().validate() == ServerConfiguration()
    ClientConfiguration().validate()


def test_optional_keys_are_unset_by_default():
    conf = ServerConfiguration()
    for key in ("bookieId", "listeningInterface", "advertisedAddress", "zkServers",
                "dbStorage_rocksDB_blockCacheSize"):
        assert conf.get(key) is None
        assert not conf.is_set(key)


def test_db_storage_caches_default_to_a_quarter_of_ram_capped_at_4_gib():
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    expected = min(physical, 4 << 30) // 4 // (1 << 20)
    assert DEFAULT_DB_STORAGE_CACHE_MB == expected
    assert 1 <= DEFAULT_DB_STORAGE_CACHE_MB <= 1024
    conf = ServerConfiguration()
    assert conf.get("dbStorage_writeCacheMaxSizeMb") == expected
    assert conf.get("dbStorage_readAheadCacheMaxSizeMb") == expected


def test_entry_timeouts_follow_read_timeout_unless_set():
    conf = ClientConfiguration({"readTimeout": "7"})
    assert conf.add_entry_timeout_s == 7
    assert conf.read_entry_timeout_s == 7
    conf.set("addEntryTimeoutSec", 3)
    assert conf.add_entry_timeout_s == 3
    assert conf.read_entry_timeout_s == 7


def test_journal_directories_default_to_the_single_journal_directory():
    assert ServerConfiguration().journal_directories == ["/tmp/bk-txn"]
    assert ServerConfiguration({"journalDirectory": "/j"}).journal_directories == ["/j"]
    conf = ServerConfiguration({"journalDirectory": "/j", "journalDirectories": "/a,/b"})
    assert conf.journal_directories == ["/a", "/b"]


def test_index_directories_default_to_ledger_directories_and_is_set_tells_them_apart():
    conf = ServerConfiguration({"ledgerDirectories": "/d1,/d2"})
    assert conf.index_directories == ["/d1", "/d2"]
    assert not conf.is_set("indexDirectories")
    conf.set("indexDirectories", "/i")
    assert conf.index_directories == ["/i"]
    assert conf.is_set("indexDirectories")


def test_disk_low_water_mark_defaults_to_the_usage_threshold_as_in_java():
    assert ServerConfiguration().disk_usage_lwm_threshold == 0.95
    assert ServerConfiguration({"diskUsageThreshold": 0.8}).disk_usage_lwm_threshold == 0.8
    assert ServerConfiguration({"diskUsageLwmThreshold": "0.85"}).disk_usage_lwm_threshold == 0.85


def test_metadata_service_uri_falls_back_to_legacy_zk_servers():
    conf = ServerConfiguration({"zkServers": "zk1:2181,zk2:2181", "zkLedgersRootPath": "/bk/ledgers"})
    assert conf.metadata_service_uri == "zk+hierarchical://zk1:2181;zk2:2181/bk/ledgers"
    conf.set("metadataServiceUri", "zk+hierarchical://other:2181/ledgers")
    assert conf.metadata_service_uri == "zk+hierarchical://other:2181/ledgers"


# --- files ------------------------------------------------------------------------------------------


def test_loading_a_realistic_bk_server_conf(tmp_path):
    path = write_conf(tmp_path, REALISTIC_BK_SERVER_CONF)
    conf = ServerConfiguration.load(path, env={})
    assert conf.bookie_port == 3182
    assert conf.use_host_name_as_bookie_id is True
    assert conf.journal_directories == ["/mnt/journal1", "/mnt/journal2"]
    assert conf.journal_max_group_wait_ms == 5
    assert conf.journal_sync_data is False
    assert conf.journal_adaptive_group_writes is True
    assert conf.ledger_directories == ["/mnt/data1", "/mnt/data2"]
    assert conf.ledger_storage_class.endswith(".ldb.DbLedgerStorage")
    assert conf.db_storage_write_cache_max_size_mb == 512
    assert conf.disk_usage_threshold == 0.97
    assert conf.metadata_service_uri == "zk+hierarchical://zk1:2181;zk2:2181/ledgers"
    # Commented-out keys stay at their defaults.
    assert conf.advertised_address is None
    assert conf.journal_queue_size == 10000
    conf.validate()


def test_unknown_keys_are_kept_and_listed_for_warnings(tmp_path):
    conf = ServerConfiguration.load(write_conf(tmp_path, REALISTIC_BK_SERVER_CONF), env={})
    assert conf.unknown_keys == ["codahaleStatsPrefix", "zkEnableSecurity"]
    assert conf.get("codahaleStatsPrefix") == "bk"
    assert conf.get("prometheusStatsHttpPort") == 8000
    assert "allowLoopback" not in conf.unknown_keys  # it was behind a '!' comment
    assert "codahaleStatsPrefix=bk" in conf.dump()


def test_client_keys_in_a_server_file_are_unknown_to_the_server():
    conf = ServerConfiguration({"digestType": "CRC32C"})
    assert conf.unknown_keys == ["digestType"]


def test_parse_properties_handles_separators_comments_and_continuations():
    text = (
        "  # comment\n"
        "! bang comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d   =   spaced value   \n"
        "e=\n"
        "f\n"
        "g=one,\\\n"
        "   two,\\\n"
        "# not a comment: continued\n"
        "h=ends with escaped backslash\\\\\n"
        "url=zk+hierarchical://h:2181/ledgers\n"
    )
    assert [(k, v) for _, k, v in parse_properties(text)] == [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "spaced value"),
        ("e", ""),
        ("f", ""),
        ("g", "one,two,# not a comment: continued"),
        ("h", "ends with escaped backslash\\\\"),
        ("url", "zk+hierarchical://h:2181/ledgers"),
    ]


def test_parse_properties_reports_line_numbers():
    assert [n for n, _, _ in parse_properties("# c\n\na=1\nb=2\\\n 3\nc=4\n")] == [3, 4, 6]


def test_bad_value_in_a_file_names_the_file_and_line(tmp_path):
    path = write_conf(tmp_path, "# header\nbookiePort=3181\njournalMaxGroupWaitMSec=2ms\n")
    with pytest.raises(ConfigurationError) as info:
        ServerConfiguration.load(path, env={})
    message = str(info.value)
    assert message.startswith("journalMaxGroupWaitMSec: expected an integer, got '2ms'")
    assert f"{path}:3" in message


def test_a_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        ServerConfiguration.load(tmp_path / "nope.conf", env={})


def test_load_without_a_file_uses_env_and_overrides():
    conf = ServerConfiguration.load(None, {"bookiePort": "4000"}, env={"BK_journalQueueSize": "7"})
    assert (conf.bookie_port, conf.journal_queue_size) == (4000, 7)


# --- precedence -------------------------------------------------------------------------------------


def test_file_overrides_defaults(tmp_path):
    conf = ServerConfiguration.load(write_conf(tmp_path, "journalMaxGroupWaitMSec=3\n"), env={})
    assert conf.journal_max_group_wait_ms == 3


def test_env_overrides_file_but_cli_overrides_env(tmp_path):
    path = write_conf(tmp_path, "journalMaxGroupWaitMSec=3\nbookiePort=4000\njournalQueueSize=11\n")
    env = {"BK_journalMaxGroupWaitMSec": "5", "BK_bookiePort": "4001"}
    conf = ServerConfiguration.load(path, overrides={"bookiePort": "4002"}, env=env)
    assert conf.journal_queue_size == 11  # file only
    assert conf.journal_max_group_wait_ms == 5  # env beats file
    assert conf.bookie_port == 4002  # CLI beats env


def test_only_bk_variables_naming_known_keys_are_read():
    env = {"BK_HOME": "/opt/bk", "BK_bookiePort": "3999", "bookiePort": "1", "BK_digestType": "MAC"}
    conf = ServerConfiguration.load(None, env=env)
    assert conf.bookie_port == 3999
    assert conf.unknown_keys == []


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigurationError, match="environment variable BK_journalSyncData"):
        ServerConfiguration.load(None, env={"BK_journalSyncData": "maybe"})


def test_load_reads_os_environ_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("BK_numReadWorkerThreads", "3")
    assert ServerConfiguration.load(None).num_read_worker_threads == 3


# --- conversion and single-key checks ---------------------------------------------------------------


def test_bad_integer_names_the_key():
    with pytest.raises(ConfigurationError) as info:
        ServerConfiguration({"journalMaxGroupWaitMSec": "abc"})
    assert str(info.value) == "journalMaxGroupWaitMSec: expected an integer, got 'abc'"


def test_value_above_maximum_names_key_value_and_limit():
    with pytest.raises(ConfigurationError) as info:
        ServerConfiguration({"diskUsageThreshold": "1.5"})
    assert str(info.value) == "diskUsageThreshold: 1.5 is above the maximum 1.0"


def test_value_below_minimum_names_key_value_and_limit():
    with pytest.raises(ConfigurationError, match=r"^journalQueueSize: 0 is below the minimum 1$"):
        ServerConfiguration({"journalQueueSize": 0})


def test_log_size_limit_may_not_exceed_one_gib():
    ServerConfiguration({"logSizeLimit": 2**30})
    with pytest.raises(ConfigurationError, match="logSizeLimit"):
        ServerConfiguration({"logSizeLimit": 2**30 + 1})


def test_configuration_errors_are_incorrect_parameter_errors():
    with pytest.raises(BKIncorrectParameterException):
        ServerConfiguration({"bookiePort": "x"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), ("Yes", True), ("1", True), (" true ", True),
     ("false", False), ("False", False), ("NO", False), ("0", False)],
)
def test_booleans_accept_true_false_yes_no_1_0_in_any_case(text, expected):
    assert ServerConfiguration({"journalSyncData": text}).journal_sync_data is expected


@pytest.mark.parametrize("text", ["", "maybe", "on", "2", "t"])
def test_other_boolean_words_are_rejected(text):
    with pytest.raises(ConfigurationError, match="journalSyncData: expected a boolean"):
        ServerConfiguration({"journalSyncData": text})


@pytest.mark.parametrize("value", ["1.5", "0x10", "1e3", "", " ", True, 2.0, [1]])
def test_integers_must_be_plain_decimal_integers(value):
    with pytest.raises(ConfigurationError, match="bookiePort: expected an integer"):
        ServerConfiguration({"bookiePort": value})


def test_integers_accept_surrounding_whitespace_and_sign():
    assert ServerConfiguration({"pageLimit": " -5 "}).page_limit == -5
    assert ServerConfiguration({"bookiePort": "+3181"}).bookie_port == 3181


@pytest.mark.parametrize("value", ["nan", "inf", "abc", "0.9f", True])
def test_floats_must_be_finite_numbers(value):
    with pytest.raises(ConfigurationError, match="diskUsageWarnThreshold: expected a number"):
        ServerConfiguration({"diskUsageWarnThreshold": value})


def test_floats_accept_integers_and_exponents():
    assert ServerConfiguration({"diskUsageThreshold": 1}).disk_usage_threshold == 1.0
    assert ServerConfiguration({"diskUsageThreshold": "9e-1"}).disk_usage_threshold == 0.9


def test_lists_are_comma_separated_with_whitespace_and_empty_parts_dropped():
    conf = ServerConfiguration({"ledgerDirectories": " /a , /b,,/c, "})
    assert conf.ledger_directories == ["/a", "/b", "/c"]
    assert ServerConfiguration({"ledgerDirectories": ["/x", "/y"]}).ledger_directories == ["/x", "/y"]
    with pytest.raises(ConfigurationError, match="ledgerDirectories: expected a comma-separated list"):
        ServerConfiguration({"ledgerDirectories": 5})


def test_returned_lists_are_copies():
    conf = ServerConfiguration()
    conf.ledger_directories.append("/oops")
    assert conf.ledger_directories == ["/tmp/bk-data"]
    assert ServerConfiguration().ledger_directories == ["/tmp/bk-data"]


def test_digest_type_is_one_of_the_bookkeeper_names():
    for name in ("CRC32", "MAC", "CRC32C", "DUMMY"):
        assert ClientConfiguration({"digestType": name}).digest_type == name
    with pytest.raises(ConfigurationError) as info:
        ClientConfiguration({"digestType": "SHA256"})
    assert str(info.value) == "digestType: expected one of CRC32, MAC, CRC32C, DUMMY, got 'SHA256'"


def test_empty_value_returns_optional_and_derived_keys_to_their_default(tmp_path):
    path = write_conf(tmp_path, "bookieId=\nadvertisedAddress=   \nindexDirectories=\nledgerDirectories=/d\n")
    conf = ServerConfiguration.load(path, env={})
    assert conf.bookie_id is None and not conf.is_set("bookieId")
    assert conf.advertised_address is None
    assert conf.index_directories == ["/d"]


def test_setting_none_returns_a_key_to_its_default():
    conf = ServerConfiguration({"bookiePort": 4000})
    conf.set("bookiePort", None)
    assert conf.bookie_port == 3181 and not conf.is_set("bookiePort")


def test_get_of_a_name_nobody_configured_is_a_key_error():
    conf = ServerConfiguration()
    with pytest.raises(KeyError, match="journalMaxGroupWaitMs"):
        conf.get("journalMaxGroupWaitMs")
    assert conf.get("journalMaxGroupWaitMs", 7) == 7


# --- accessors ---------------------------------------------------------------------------------------


def test_accessors_read_the_bookkeeper_keys():
    conf = ServerConfiguration({"journalMaxGroupWaitMSec": "9", "bookiePort": 4181})
    assert conf.journal_max_group_wait_ms == 9
    assert conf.bookie_port == 4181
    assert conf.zk_timeout_ms == 10000
    assert ServerConfiguration.accessors()["journal_max_group_wait_ms"] == "journalMaxGroupWaitMSec"


@pytest.mark.parametrize("cls", [ServerConfiguration, ClientConfiguration])
def test_every_accessor_names_a_key_of_its_class(cls):
    accessors = cls.accessors()
    assert accessors
    conf = cls()
    for attr, key in accessors.items():
        assert getattr(conf, attr) == conf.get(key)
        assert cls.key_info(key).name == key


def test_every_server_key_has_an_accessor():
    covered = set(ServerConfiguration.accessors().values()) | {"journalFlushWhenQueueEmpty"}
    assert covered == {key.name for key in ServerConfiguration.KEYS}


def test_accessors_are_read_only():
    conf = ServerConfiguration()
    with pytest.raises(AttributeError, match="read-only"):
        conf.bookie_port = 1


def test_flush_when_queue_empty_is_forced_when_group_wait_is_not_positive():
    assert ServerConfiguration().journal_flush_when_queue_empty is False
    assert ServerConfiguration({"journalFlushWhenQueueEmpty": True}).journal_flush_when_queue_empty is True
    conf = ServerConfiguration({"journalMaxGroupWaitMSec": 0})
    assert conf.journal_flush_when_queue_empty is True
    assert conf.get("journalFlushWhenQueueEmpty") is False  # the configured value is left alone


# --- cross-key validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"diskUsageWarnThreshold": 0.96}, "diskUsageWarnThreshold: 0.96 is above diskUsageThreshold 0.95"),
        ({"diskUsageLwmThreshold": 0.99}, "diskUsageLwmThreshold: 0.99 is above diskUsageThreshold"),
        ({"diskUsageThreshold": 1.0}, "diskUsageThreshold: 1.0 must be above 0 and below 1"),
        ({"journalAlignmentSize": 1000}, "journalAlignmentSize: 1000 is not a multiple of 512"),
        ({"journalAlignmentSize": 4 << 20, "journalPreAllocSizeMB": 2}, "journalPreAllocSizeMB: 2 MB"),
        ({"bookiePort": 0}, "allowEphemeralPorts"),
        ({"fileInfoFormatVersionToWrite": 0}, "explicit LAC"),
        ({"ledgerDirectories": ""}, "at least one ledger directory"),
        ({"minorCompactionInterval": 60}, "minorCompactionInterval: 60 s is shorter than gcWaitTime"),
        ({"minorCompactionThreshold": 0.9}, "minor compaction must run more often"),
    ],
)
def test_validate_rejects_what_java_rejects(overrides, complaint):
    conf = ServerConfiguration(overrides)
    with pytest.raises(ConfigurationError, match="invalid ServerConfiguration") as info:
        conf.validate()
    assert complaint in str(info.value)


def test_validate_reports_every_problem_at_once():
    conf = ServerConfiguration({"diskUsageWarnThreshold": 0.99, "journalAlignmentSize": 1000})
    with pytest.raises(ConfigurationError) as info:
        conf.validate()
    assert "diskUsageWarnThreshold" in str(info.value)
    assert "journalAlignmentSize" in str(info.value)


def test_validate_accepts_what_java_accepts():
    ServerConfiguration({"bookiePort": 0, "allowEphemeralPorts": True}).validate()
    ServerConfiguration({"journalAlignmentSize": 4096}).validate()
    # Compaction switched off is not checked against gcWaitTime.
    ServerConfiguration({"minorCompactionInterval": 0, "majorCompactionThreshold": 0.0}).validate()
    assert ServerConfiguration().validate().bookie_port == 3181


# --- round trips ----------------------------------------------------------------------------------------


def test_dump_then_load_gives_an_equal_configuration(tmp_path):
    original = ServerConfiguration.load(write_conf(tmp_path, REALISTIC_BK_SERVER_CONF), env={})
    copy_path = tmp_path / "copy.conf"
    copy_path.write_text(original.dump())
    reloaded = ServerConfiguration.load(copy_path, env={})
    assert reloaded == original
    assert reloaded.unknown_keys == original.unknown_keys


def test_dump_writes_bookkeeper_syntax():
    conf = ServerConfiguration({"journalSyncData": False, "ledgerDirectories": ["/a", "/b"],
                                "diskUsageThreshold": 0.9})
    assert conf.dump() == "ledgerDirectories=/a,/b\njournalSyncData=false\ndiskUsageThreshold=0.9\n"


def test_dump_with_defaults_lists_every_known_key_with_a_value():
    text = ServerConfiguration().dump(include_defaults=True)
    names = [line.split("=", 1)[0] for line in text.splitlines()]
    assert "journalMaxGroupWaitMSec" in names
    assert "bookieId" not in names  # unset optional keys are left out
    as_text = dict(line.split("=", 1) for line in text.splitlines())
    assert ServerConfiguration(as_text) == ServerConfiguration()


def test_to_dict_round_trips_through_the_constructor():
    conf = ClientConfiguration({"readTimeout": 9, "digestType": "CRC32C", "customKey": "x"})
    assert conf.to_dict() == {"readTimeout": 9, "digestType": "CRC32C", "customKey": "x"}
    assert ClientConfiguration(conf.to_dict()) == conf
    assert ClientConfiguration(conf.to_dict(include_defaults=True)) == conf


def test_configurations_of_different_kinds_are_not_equal():
    assert Configuration() != ServerConfiguration()
    assert ServerConfiguration() != ClientConfiguration()


@given(
    port=st.integers(min_value=1, max_value=65535),
    wait=st.integers(min_value=-(2**40), max_value=2**40),
    sync=st.booleans(),
    threshold=st.floats(min_value=0.0, max_value=1.0),
    dirs=st.lists(st.text(alphabet="abc/_-.0123456789", min_size=1).filter(lambda s: s.strip()),
                  min_size=1, max_size=4),
)
def test_any_valid_values_survive_dump_and_load(tmp_path_factory, port, wait, sync, threshold, dirs):
    conf = ServerConfiguration({"bookiePort": port, "journalMaxGroupWaitMSec": wait, "journalSyncData": sync,
                                "diskUsageWarnThreshold": threshold, "ledgerDirectories": dirs})
    path = tmp_path_factory.mktemp("rt") / "bk_server.conf"
    path.write_text(conf.dump())
    assert ServerConfiguration.load(path, env={}) == conf
