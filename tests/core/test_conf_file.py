"""conf/bk_server.conf lists every key bkfast reads; unknown keys are reported with the closest known key;
listeningInterface/advertisedAddress/useHostNameAsBookieID turn into a bind address and a bookie id."""

from __future__ import annotations

import ast
import logging
import re
import socket
from pathlib import Path

import pytest

import bkfast
from bkfast.conf import CLIENT_KEYS, ServerConfiguration, format_value, log_unknown_keys, unknown_key_warnings
from bkfast.errors import ConfigurationError
from bkfast.ids import bookie_address, interface_ipv4, interface_names
from tests import REPO

REPO = REPO
CONF_FILE = REPO / "conf" / "bk_server.conf"
_LINE = re.compile(r"#?([A-Za-z][A-Za-z0-9_]*)=(.*)")
_KEY_NAME = re.compile(r"[a-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*")


def listed_keys() -> dict[str, str]:
    """key -> value shown in the shipped file, whether the line is commented out or not."""
    out: dict[str, str] = {}
    for line in CONF_FILE.read_text().splitlines():
        match = _LINE.fullmatch(line.strip())
        if match:
            assert match.group(1) not in out, f"{match.group(1)} is listed twice"
            out[match.group(1)] = match.group(2)
    return out


def keys_read_by_code() -> set[str]:
    """String literals passed to `<something conf-like>.get("key", ...)` anywhere under bkfast/."""
    found = set()
    for path in Path(bkfast.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and node.args):
                continue
            first = node.args[0]
            receiver = ast.unparse(node.func.value)
            if (isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and _KEY_NAME.fullmatch(first.value) and ("conf" in receiver.lower() or receiver in {"c", "self"})
                    and any(ch.isupper() for ch in first.value)):
                found.add(first.value)
    return found


def test_shipped_conf_loads_validates_and_has_no_unknown_keys():
    conf = ServerConfiguration.load(CONF_FILE, env={}).validate()
    assert conf.unknown_keys == []
    assert conf.get("bookiePort") == 3181 and conf.get("journalDirectories") == ["/tmp/bk-txn"]


def test_shipped_conf_lists_every_server_key_and_every_key_the_code_reads():
    listed = listed_keys()
    server_keys = {key.name for key in ServerConfiguration.KEYS}
    client_only = {key.name for key in CLIENT_KEYS} - server_keys
    read = keys_read_by_code()
    assert {"journalMaxGroupWaitMSec", "zkTimeout", "ledgerStorageClass"} <= read   # the scan finds reads
    assert server_keys - set(listed) == set()
    assert (read - client_only) - set(listed) == set()
    assert set(listed) - server_keys == set()            # nothing listed that bkfast does not read


# Keys the shipped conf sets on purpose to something other than the code's (Java's) default: the stats
# provider is Prometheus in bkfast's conf, as in Apache Pulsar's bookkeeper.conf.
SET_BY_SHIPPED_CONF = {"statsProviderClass": "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"}


def test_shipped_conf_shows_each_default():
    for name, shown in listed_keys().items():
        key = ServerConfiguration.key_info(name)
        if name in SET_BY_SHIPPED_CONF:
            assert shown == SET_BY_SHIPPED_CONF[name] != key.default
            continue
        if shown == "" or key.derive is not None or key.default is None:
            continue
        if name == "journalDirectories":
            assert shown == format_value(ServerConfiguration().get(name))
            continue
        assert shown == format_value(key.default), name


def test_every_listed_key_has_a_line_of_explanation():
    lines = CONF_FILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if _LINE.fullmatch(line.strip()):
            assert lines[i - 1].startswith("# ") and len(lines[i - 1]) > 10, f"no explanation above {line!r}"


def test_misspelled_key_is_kept_and_reported_with_the_closest_key(tmp_path, caplog):
    path = tmp_path / "bk_server.conf"
    path.write_text("journalDirectores=/data/j\nJOURNALMAXBACKUPS=3\ncodahaleStatsPrefix=bk\n"
                    "allowLoopback=true\nmyPluginKey=1\n")
    conf = ServerConfiguration.load(path, env={})
    assert conf.get("journalDirectores") == "/data/j"              # kept for plugins
    suggestions, others = unknown_key_warnings(conf)
    assert suggestions == [
        "journalDirectores is not a key bkfast reads; did you mean journalDirectories?",
        "JOURNALMAXBACKUPS is not a key bkfast reads; did you mean journalMaxBackups?",
    ]
    assert others == ["codahaleStatsPrefix", "allowLoopback", "myPluginKey"]
    with caplog.at_level(logging.INFO, logger="bkfast.conf"):
        log_unknown_keys(conf)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert warnings == suggestions
    assert infos == ["BookKeeper keys bkfast does not read (what they set is built in, absent or fixed here; "
                     "not misspellings): codahaleStatsPrefix, allowLoopback",
                     "keys bkfast does not read (kept for plugins): myPluginKey"]


def test_known_keys_give_no_warning():
    assert unknown_key_warnings(ServerConfiguration.load(CONF_FILE, env={})) == ([], [])


# --- listeningInterface -> bind address and bookie id ---------------------------------------------


def test_loopback_interface_resolves_to_127_0_0_1():
    assert "lo" in interface_names()
    assert interface_ipv4("lo") == "127.0.0.1"


def test_listening_interface_lo_binds_and_names_the_bookie_by_its_address():
    address = bookie_address(ServerConfiguration({"listeningInterface": "lo", "bookiePort": 3181}))
    assert (address.bind_host, address.host, address.bookie_id) == ("127.0.0.1", "127.0.0.1", "127.0.0.1:3181")


def test_advertised_address_wins_for_the_id_but_the_interface_is_still_bound():
    address = bookie_address(ServerConfiguration(
        {"listeningInterface": "lo", "advertisedAddress": "bk1.example.com", "bookiePort": 4000}))
    assert (address.bind_host, address.bookie_id) == ("127.0.0.1", "bk1.example.com:4000")


def test_explicit_bookie_id_wins():
    address = bookie_address(ServerConfiguration({"listeningInterface": "lo", "bookieId": "my-bookie"}))
    assert address.bookie_id == "my-bookie" and address.host == "127.0.0.1"


def test_host_name_as_bookie_id_and_short_host_name():
    name = socket.gethostbyaddr("127.0.0.1")[0]
    conf = ServerConfiguration({"listeningInterface": "lo", "useHostNameAsBookieID": True, "bookiePort": 1})
    assert bookie_address(conf).bookie_id == f"{name}:1"
    conf.set("useShortHostName", True)
    assert bookie_address(conf).bookie_id == f"{name.split('.')[0]}:1"


def test_no_interface_binds_everything_and_uses_the_local_host_address():
    address = bookie_address(ServerConfiguration({"bookiePort": 5}))
    assert address.bind_host == "0.0.0.0"
    assert address.host == socket.gethostbyname(socket.getfqdn()) or address.host == socket.gethostbyname(
        socket.gethostname())


def test_an_ip_address_in_listening_interface_is_bound_as_is():
    address = bookie_address(ServerConfiguration({"listeningInterface": "127.0.0.1", "bookiePort": 7}))
    assert (address.bind_host, address.bookie_id) == ("127.0.0.1", "127.0.0.1:7")


def test_unknown_interface_is_a_one_line_error_naming_the_key():
    with pytest.raises(ConfigurationError) as err:
        bookie_address(ServerConfiguration({"listeningInterface": "nosuch9"}))
    assert str(err.value).startswith("listeningInterface: no network interface named 'nosuch9'")
    assert "lo" in str(err.value) and "\n" not in str(err.value)


def java_conf_keys() -> list[str]:
    text = (REPO / "tests" / "vectors" / "java_bk_server_conf_keys.txt").read_text()
    return [word for line in text.splitlines() if not line.startswith("#") for word in line.split()]


def test_no_key_of_a_java_bk_server_conf_is_taken_for_a_misspelling(tmp_path):
    from bkfast.conf_java import JAVA_SERVER_KEYS_NOT_READ

    server_keys = {key.name for key in ServerConfiguration.KEYS}
    client_keys = {key.name for key in CLIENT_KEYS}
    keys = java_conf_keys()
    assert len(keys) > 150
    assert not JAVA_SERVER_KEYS_NOT_READ & (server_keys | client_keys)      # a key bkfast reads leaves that list
    assert set(keys) <= server_keys | client_keys | JAVA_SERVER_KEYS_NOT_READ
    lines = []
    for name in keys:
        if name in server_keys:
            default = ServerConfiguration().get(name)
            if default is not None:
                lines.append(f"{name}={format_value(default)}")
        else:
            lines.append(f"{name}=some-value")
    path = tmp_path / "java_bk_server.conf"
    path.write_text("\n".join(lines) + "\n")
    conf = ServerConfiguration.load(path, env={})
    suggestions, others = unknown_key_warnings(conf)
    assert suggestions == []
    assert set(others) == set(keys) - server_keys
    # ...while a typo of one of them is still caught
    conf.set("dbStorage_rocksDB_blockCachSize", "1")
    assert unknown_key_warnings(conf)[0] == [
        "dbStorage_rocksDB_blockCachSize is not a key bkfast reads; did you mean dbStorage_rocksDB_blockCacheSize?"]
