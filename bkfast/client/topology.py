"""Where each bookie is: its network location, and the mappings that give it (Java's DNSToSwitchMapping).

A location is a path: `/rack` for the rack-aware policy, `/region/rack` for the region-aware one,
`/zone/upgradedomain` for the zone-aware one. It comes from the mapping `reppDnsResolverClass` names:
- `org.apache.bookkeeper.net.ScriptBasedMapping` (Java's default): runs `networkTopologyScriptFileName`
  with bookie host names as arguments, at most `networkTopologyScriptNumberArgs` per run, and reads one
  location per argument from its output (whitespace-separated, as Java's RawScriptBasedMapping). A run that
  fails or prints the wrong number of locations resolves that whole request to nothing, which is logged and
  not cached; answers are cached per host (Java's CachedDNSToSwitchMapping). No script: every bookie is in
  the default location. A script that is not an executable file: the default mapping, logged once.
- Pulsar's `org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping` (or its old name
  `org.apache.pulsar.zookeeper.ZkBookieRackAffinityMapping`): the rack table of bkfast.meta.rack_table, kept
  current by the metadata driver's watch. A bookie is looked up by its id ("host:port"), then by its host
  (Pulsar's own lookup, by host name or address).
- anything else: Java's DefaultResolver (every bookie in the default location), logged once.
A bookie the mapping does not place, or places at a location of the wrong shape for the policy, is at the
policy's default location (`/default-rack`, `/default-region/default-rack`, `/default-zone/default-upgradedomain`).

`Topology` keeps bookie id -> location for one client: mappings that run scripts are asked from a thread
(`resolve_blocking`), never from the reactor; the rack table is a dict lookup. Must never: block the reactor.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping

from bkfast.meta.rack_table import RackTable, normalize_rack

__all__ = ["DEFAULT_RACK", "DEFAULT_REGION", "DEFAULT_REGION_AND_RACK", "DEFAULT_ZONE", "DEFAULT_UPGRADE_DOMAIN",
           "DEFAULT_ZONE_AND_UPGRADE_DOMAIN", "SCRIPT_BASED_MAPPING", "RACK_TABLE_MAPPINGS", "DefaultMapping",
           "ScriptBasedMapping", "RackTableMapping", "mapping_from_conf", "normalize_location", "Topology",
           "host_of", "path_parts"]

log = logging.getLogger(__name__)

DEFAULT_RACK = "/default-rack"
DEFAULT_REGION = "/default-region"
DEFAULT_REGION_AND_RACK = "/default-region/default-rack"
DEFAULT_ZONE = "/default-zone"
DEFAULT_UPGRADE_DOMAIN = "/default-upgradedomain"
DEFAULT_ZONE_AND_UPGRADE_DOMAIN = "/default-zone/default-upgradedomain"

SCRIPT_BASED_MAPPING = "org.apache.bookkeeper.net.ScriptBasedMapping"
RACK_TABLE_MAPPINGS = frozenset({"org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping",
                                 "org.apache.pulsar.zookeeper.ZkBookieRackAffinityMapping"})
SCRIPT_TIMEOUT_S = 30.0


def normalize_location(text: str | None) -> str | None:
    """'/a/b' from 'a/b', '/a/b/' or '/a//b'; None for nothing, '' or '/'."""
    if text is None:
        return None
    parts = [p for p in str(text).strip().split("/") if p]
    return "/" + "/".join(parts) if parts else None


def path_parts(location: str) -> list[str]:
    """The components of a location: '/region/rack' -> ['region', 'rack']."""
    return [p for p in location.split("/") if p]


def host_of(bookie_id: str, info=None) -> str:
    """The host a mapping is asked about: the registered endpoint's host, else the id's host part."""
    host = getattr(info, "host", None)
    if host:
        return host
    head, sep, _port = bookie_id.rpartition(":")
    return (head if sep else bookie_id).strip("[]")


class DefaultMapping:
    """Java's DefaultResolver: no bookie has a location (the policy's default applies)."""

    blocking = False
    uses_rack_table = False

    def resolve(self, bookies: list[tuple[str, str]]) -> list[str | None]:
        return [None] * len(bookies)

    def __repr__(self) -> str:
        return "DefaultMapping()"


class ScriptBasedMapping:
    """Java's ScriptBasedMapping (see the module docstring). `resolve` blocks: call it from a thread."""

    blocking = True
    uses_rack_table = False

    def __init__(self, script: str, number_args: int = 100, timeout_s: float = SCRIPT_TIMEOUT_S):
        self.script = script
        self.number_args = max(1, int(number_args))
        self.timeout_s = timeout_s
        self._cache: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self.runs = 0                      # how many times the script ran (tests, diagnostics)

    def resolve(self, bookies: list[tuple[str, str]]) -> list[str | None]:
        hosts = [host for _bid, host in bookies]
        with self._lock:
            wanted = list(dict.fromkeys(h for h in hosts if h not in self._cache))
        if wanted:
            found = self._run_all(wanted)
            if found is not None:
                with self._lock:
                    self._cache.update(zip(wanted, found, strict=True))
        with self._lock:
            return [self._cache.get(h) for h in hosts]

    def _run_all(self, hosts: list[str]) -> list[str | None] | None:
        out: list[str] = []
        for start in range(0, len(hosts), self.number_args):
            batch = hosts[start:start + self.number_args]
            text = self._run(batch)
            if text is None:
                return None
            out += text.split()
        if len(out) != len(hosts):
            log.error("topology script %s printed %d locations for %d hosts; they stay in the default location",
                      self.script, len(out), len(hosts))
            return None
        return [normalize_location(x) for x in out]

    def _run(self, batch: list[str]) -> str | None:
        self.runs += 1
        try:
            proc = subprocess.run([self.script, *batch], capture_output=True, timeout=self.timeout_s,
                                  cwd=os.getcwd(), check=False)
        except (OSError, subprocess.SubprocessError) as err:
            log.warning("topology script %s %s failed: %s", self.script, " ".join(batch), err)
            return None
        if proc.returncode != 0:
            log.warning("topology script %s %s exited with %d: %s", self.script, " ".join(batch), proc.returncode,
                        proc.stderr.decode("utf-8", "replace").strip()[:500])
            return None
        return proc.stdout.decode("utf-8", "replace")

    def reload(self) -> None:
        """Forget the cached answers (Java's reloadCachedMappings)."""
        with self._lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"ScriptBasedMapping({self.script!r}, number_args={self.number_args})"


class RackTableMapping:
    """Pulsar's BookieRackAffinityMapping over the rack table (bkfast.meta.rack_table), set by its watch."""

    blocking = False
    uses_rack_table = True

    def __init__(self, table: RackTable | None = None):
        self._by_address: dict[str, str | None] = {}
        self._by_host: dict[str, str | None] = {}
        self.set_table(table or {})

    def set_table(self, table: RackTable) -> None:
        by_address: dict[str, str | None] = {}
        by_host: dict[str, str | None] = {}
        for bookies in table.values():
            for address, info in bookies.items():
                rack = normalize_rack(info.get("rack"))
                by_address.setdefault(address, rack)
                by_host.setdefault(host_of(address), rack)
                if info.get("hostname"):
                    by_host.setdefault(info["hostname"], rack)
        self._by_address, self._by_host = by_address, by_host

    def resolve(self, bookies: list[tuple[str, str]]) -> list[str | None]:
        by_address, by_host = self._by_address, self._by_host
        return [by_address[bid] if bid in by_address else by_host.get(host) for bid, host in bookies]

    def __repr__(self) -> str:
        return f"RackTableMapping({len(self._by_address)} bookies)"


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def mapping_from_conf(conf) -> DefaultMapping | ScriptBasedMapping | RackTableMapping:
    """The mapping `reppDnsResolverClass` names (see the module docstring)."""
    name = (conf.get("reppDnsResolverClass") or SCRIPT_BASED_MAPPING).strip()
    if name in RACK_TABLE_MAPPINGS:
        return RackTableMapping()
    if name != SCRIPT_BASED_MAPPING:
        _warn_once(f"class:{name}", "reppDnsResolverClass %s is not a mapping bkfast has; every bookie is in the "
                   "default location (Java's DefaultResolver). Use %s or %s", name, SCRIPT_BASED_MAPPING,
                   sorted(RACK_TABLE_MAPPINGS)[0])
        return DefaultMapping()
    script = conf.get("networkTopologyScriptFileName")
    if not script:
        return DefaultMapping()
    if not (os.path.isfile(script) and os.access(script, os.X_OK)):
        _warn_once(f"script:{script}", "networkTopologyScriptFileName %s is not an executable file; every bookie "
                   "is in the default location", script)
        return DefaultMapping()
    return ScriptBasedMapping(script, conf.get("networkTopologyScriptNumberArgs"))


class Topology:
    """bookie id -> location for one client. `valid(location)` says whether a location has the shape the
    policy needs; others (and unplaced bookies) are at `default_location`. `version` grows on every change
    (policies rebuild their indexes then); `listeners` are called (no argument) after a change."""

    def __init__(self, mapping, default_location: str, valid: Callable[[str], bool] = lambda loc: True):
        self.mapping = mapping
        self.default_location = default_location
        self.valid = valid
        self._locations: dict[str, str] = {}
        self._hosts: dict[str, str] = {}
        self.version = 0
        self.listeners: list[Callable[[], None]] = []
        self.local_location: str | None = None

    def location(self, bookie_id: str) -> str:
        """The known location of a bookie, else the default (never resolves: never blocks)."""
        return self._locations.get(bookie_id, self.default_location)

    def known(self, bookie_id: str) -> bool:
        return bookie_id in self._locations

    def snapshot(self) -> dict[str, str]:
        return dict(self._locations)

    def unresolved(self, bookies: Mapping[str, object] | Iterable[str]) -> list[tuple[str, str]]:
        """(bookie id, host) of the bookies not located yet; `bookies` maps ids to BookieInfo, or is ids."""
        items = bookies.items() if isinstance(bookies, Mapping) else ((b, None) for b in bookies)
        return [(bid, host_of(bid, info)) for bid, info in items if bid not in self._locations]

    def resolve_blocking(self, bookies: list[tuple[str, str]]) -> dict[str, str]:
        """Ask the mapping (may run the script: call from a thread for a blocking mapping)."""
        if not bookies:
            return {}
        found = self.mapping.resolve(bookies)
        out = {}
        for (bid, host), raw in zip(bookies, found, strict=True):
            out[bid] = normalize_location(raw) or self.default_location
            self._hosts[bid] = host
        return out

    def _checked(self, bookie_id: str, location: str | None) -> str:
        location = normalize_location(location)
        if location is None:
            return self.default_location
        if not self.valid(location):
            _warn_once(f"shape:{location}", "bookie %s is at %s, which is not a location this placement policy reads "
                       "(it wants the shape of %s); it is placed at the default location", bookie_id, location,
                       self.default_location)
            return self.default_location
        return location

    def apply(self, locations: Mapping[str, str]) -> bool:
        """Record resolved locations (reactor thread; a location of the wrong shape for the policy becomes the
        default); True (and listeners called) if anything changed."""
        checked = {bid: self._checked(bid, loc) for bid, loc in locations.items()}
        changed = {bid: loc for bid, loc in checked.items() if self._locations.get(bid) != loc}
        if not changed:
            return False
        self._locations.update(changed)
        self.version += 1
        for listener in list(self.listeners):
            listener()
        return True

    def locate(self, bookies) -> bool:
        """Resolve and record in one go the bookies not located yet (a mapping that does not block only)."""
        return self.apply(self.resolve_blocking(self.unresolved(bookies)))

    def relocate_all(self) -> bool:
        """Resolve every known bookie again (the rack table changed); the mapping must not block."""
        pairs = [(bid, self._hosts.get(bid) or host_of(bid)) for bid in self._locations]
        return self.apply(self.resolve_blocking(pairs))

    def resolve_local(self) -> None:
        """The client's own location, from its host name (Java resolves its local node the same way)."""
        try:
            host = socket.gethostname()
        except OSError:
            return
        found = normalize_location(self.mapping.resolve([("", host)])[0])
        self.local_location = found if found is not None and self.valid(found) else None
