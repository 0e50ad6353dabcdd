"""Where bookies are: Java's ScriptBasedMapping run as a real script (host names as arguments, batches of
networkTopologyScriptNumberArgs, one location per host, answers cached, a broken script leaving bookies in the
default rack), Pulsar's rack table (`/bookies`) read and written byte for byte as Pulsar's Jackson writes it,
changed with CAS and watched on a real ZooKeeper, and the mapping a configuration names."""

from __future__ import annotations

import json
import stat
import threading
import time
from pathlib import Path

import pytest

from bkfast.client.topology import (
    DEFAULT_RACK,
    DefaultMapping,
    RackTableMapping,
    ScriptBasedMapping,
    Topology,
    mapping_from_conf,
    normalize_location,
)
from bkfast.conf import ClientConfiguration
from bkfast.errors import MetadataError
from bkfast.meta.rack_table import (
    find_bookie,
    parse_rack_table,
    rack_table_path,
    read_rack_table,
    serialize_rack_table,
    update_rack_table,
    watch_rack_table,
    with_bookie,
    without_bookie,
)

PULSAR = "org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping"


def script(tmp_path: Path, body: str, name: str = "topology.sh") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# --- ScriptBasedMapping -----------------------------------------------------------------------------------

RACK_BY_LAST_OCTET = """
log="$(dirname "$0")/calls.log"
echo "$#:$*" >> "$log"
for host in "$@"; do
  case "$host" in
    *.1|*.2) echo "/rack-a" ;;
    *.3|*.4) printf '/rack-b\\n' ;;
    *) echo "rack-c/" ;;
  esac
done
"""


def test_script_mapping_runs_the_script_with_host_names_in_batches_and_caches(tmp_path):
    mapping = ScriptBasedMapping(script(tmp_path, RACK_BY_LAST_OCTET), number_args=2)
    hosts = [(f"10.0.0.{i}:3181", f"10.0.0.{i}") for i in range(1, 6)]
    assert mapping.resolve(hosts) == ["/rack-a", "/rack-a", "/rack-b", "/rack-b", "/rack-c"]
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == ["2:10.0.0.1 10.0.0.2", "2:10.0.0.3 10.0.0.4", "1:10.0.0.5"]
    assert mapping.resolve(hosts[::-1] + [("x:1", "10.0.0.1")]) == ["/rack-c", "/rack-b", "/rack-b", "/rack-a",
                                                                   "/rack-a", "/rack-a"]
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 3          # all cached: no new run
    assert mapping.runs == 3


def test_script_mapping_batches_100_hosts_per_run_by_default(tmp_path):
    mapping = mapping_from_conf(ClientConfiguration({"networkTopologyScriptFileName":
                                                     script(tmp_path, RACK_BY_LAST_OCTET)}))
    assert isinstance(mapping, ScriptBasedMapping) and mapping.number_args == 100
    mapping.resolve([(f"h{i}:1", f"h{i}.5") for i in range(250)])
    assert [line.split(":")[0] for line in (tmp_path / "calls.log").read_text().splitlines()] == ["100", "100", "50"]


@pytest.mark.parametrize("body", ["echo /r1\n", "exit 3\n", "echo /r1 /r2 /r3\n"])
def test_a_script_that_fails_or_miscounts_leaves_the_request_unplaced_and_uncached(tmp_path, body):
    mapping = ScriptBasedMapping(script(tmp_path, body))
    assert mapping.resolve([("a:1", "a"), ("b:1", "b")]) == [None, None]
    mapping.resolve([("a:1", "a"), ("b:1", "b")])
    assert mapping.runs == 2                                       # asked again: failures are not cached


def test_conf_without_a_usable_script_is_the_default_mapping(tmp_path, caplog):
    assert isinstance(mapping_from_conf(ClientConfiguration()), DefaultMapping)
    not_executable = tmp_path / "plain.sh"
    not_executable.write_text("echo /r1\n")
    assert isinstance(mapping_from_conf(ClientConfiguration({"networkTopologyScriptFileName": str(not_executable)})),
                      DefaultMapping)
    assert "not an executable file" in caplog.text
    assert isinstance(mapping_from_conf(ClientConfiguration({"reppDnsResolverClass": "org.example.Nope"})),
                      DefaultMapping)
    assert isinstance(mapping_from_conf(ClientConfiguration({"reppDnsResolverClass": PULSAR})), RackTableMapping)


def test_topology_places_unknown_and_misshapen_locations_at_the_policys_default(tmp_path):
    topology = Topology(ScriptBasedMapping(script(tmp_path, RACK_BY_LAST_OCTET)), "/default-zone/default-upgradedomain",
                        lambda loc: loc.count("/") == 2)
    assert topology.location("b:1") == "/default-zone/default-upgradedomain"
    changed = []
    topology.listeners.append(lambda: changed.append(topology.version))
    assert topology.locate({"10.0.0.1:3181": None, "10.0.0.9:3181": None})
    assert topology.snapshot() == {"10.0.0.1:3181": "/default-zone/default-upgradedomain",
                                   "10.0.0.9:3181": "/default-zone/default-upgradedomain"}
    assert topology.apply({"10.0.0.1:3181": "/az1/ud1"}) and changed == [1, 2]
    assert not topology.apply({"10.0.0.1:3181": "az1/ud1/"})          # the same location, normalized
    assert normalize_location("//a//b/") == "/a/b" and normalize_location("/") is None


# --- Pulsar's rack table ----------------------------------------------------------------------------------

# What Pulsar's `pulsar-admin bookies set-bookie-rack` leaves in /bookies: Jackson's compact JSON of a
# BookiesRackConfiguration (TreeMap group -> TreeMap address -> BookieInfo{rack, hostname}), null hostname omitted.
PULSAR_BYTES = (b'{"default":{"127.0.0.1:3181":{"rack":"/rack1","hostname":"bookie1.example.com"},'
                b'"127.0.0.1:3182":{"rack":"rack2"}},'
                b'"group-b":{"10.0.0.7:3181":{"rack":"/east/rack-\xc3\xa9","hostname":"b7"}}}')


def test_the_table_pulsar_writes_is_read_and_written_back_byte_for_byte():
    table = parse_rack_table(PULSAR_BYTES)
    assert table["default"]["127.0.0.1:3182"] == {"rack": "rack2"}
    assert table["group-b"]["10.0.0.7:3181"] == {"rack": "/east/rack-\u00e9", "hostname": "b7"}
    assert serialize_rack_table(table) == PULSAR_BYTES
    # built up the way Pulsar's updateBookie does (groups and addresses sorted as Java's TreeMap sorts them)
    built = with_bookie({}, "group-b", "10.0.0.7:3181", "/east/rack-\u00e9", "b7")
    built = with_bookie(built, "default", "127.0.0.1:3182", "rack2")
    built = with_bookie(built, "default", "127.0.0.1:3181", "/rack1", "bookie1.example.com")
    assert serialize_rack_table(built) == PULSAR_BYTES


def test_table_edits_follow_pulsars_bookies_rack_configuration():
    table = parse_rack_table(PULSAR_BYTES)
    moved = with_bookie(table, "group-b", "127.0.0.1:3182", "/rack9")
    assert find_bookie(moved, "127.0.0.1:3182") == ("group-b", {"rack": "/rack9"})
    assert "127.0.0.1:3182" not in moved["default"]                   # out of its old group
    emptied, removed = without_bookie(moved, "10.0.0.7:3181")
    assert removed and set(emptied["group-b"]) == {"127.0.0.1:3182"}
    gone, removed = without_bookie(without_bookie(emptied, "127.0.0.1:3182")[0], "nope:1")
    assert not removed and "group-b" not in gone                       # an emptied group goes
    for bad in ("", "/", "  "):
        with pytest.raises(MetadataError, match="invalid rack"):
            with_bookie({}, "default", "a:1", bad)
    assert parse_rack_table(b'{"g":{"a:1":{"rack":"/r","hostname":null,"extra":1}}}') == {"g": {"a:1": {"rack": "/r"}}}
    for junk in (b"[1]", b'{"g": 3}', b"{nope"):
        with pytest.raises(MetadataError, match="rack table"):
            parse_rack_table(junk)


def test_the_table_lives_beside_the_ledgers_root():
    assert rack_table_path("/ledgers") == "/bookies"
    assert rack_table_path("/pulsar/cluster-a/ledgers") == "/pulsar/cluster-a/bookies"


@pytest.mark.zookeeper
def test_table_updates_are_cas_writes_that_lose_nothing_under_concurrency(zk_client):
    path = rack_table_path("/ledgers")
    assert read_rack_table(zk_client, path) == ({}, -1)

    def writer(n):
        for i in range(10):
            update_rack_table(zk_client, path, lambda t, n=n, i=i: with_bookie(t, "default", f"10.0.{n}.{i}:3181",
                                                                               f"/rack{n}"))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table, version = read_rack_table(zk_client, path)
    assert len(table["default"]) == 40 and version >= 39
    assert zk_client.get(path)[0] == serialize_rack_table(table)


@pytest.mark.zookeeper
def test_the_watch_delivers_the_table_now_and_after_every_change(zk_client):
    path = "/pulsar/bookies"
    seen = []
    cancel = watch_rack_table(zk_client, path, seen.append)

    def wait_for(expected):
        deadline = time.monotonic() + 10
        while not seen or seen[-1] != expected:
            assert time.monotonic() < deadline, seen
            time.sleep(0.02)

    wait_for({})
    zk_client.create(path, PULSAR_BYTES, makepath=True)              # written by "Pulsar"
    wait_for(parse_rack_table(PULSAR_BYTES))
    zk_client.set(path, b"{broken")                                  # skipped: the last good table stays
    zk_client.set(path, json.dumps({"g": {"a:1": {"rack": "/r"}}}).encode())
    wait_for({"g": {"a:1": {"rack": "/r"}}})
    cancel()
    zk_client.delete(path)
    time.sleep(0.3)
    assert seen[-1] == {"g": {"a:1": {"rack": "/r"}}}


def test_rack_table_mapping_follows_table_changes():
    mapping = RackTableMapping()
    topology = Topology(mapping, DEFAULT_RACK)
    topology.locate(["10.0.0.1:3181", "10.0.0.2:3181"])
    assert topology.location("10.0.0.1:3181") == DEFAULT_RACK
    mapping.set_table({"default": {"10.0.0.1:3181": {"rack": "/r1"}}, "g": {"10.0.0.2:4181": {"rack": "/r2"}}})
    assert topology.relocate_all()
    assert topology.snapshot() == {"10.0.0.1:3181": "/r1", "10.0.0.2:3181": "/r2"}     # the second by its host
