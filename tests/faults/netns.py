"""The fault harness's network: one Linux network namespace per host, all linked through one bridge.

Owns creating and removing the namespaces, the bridge and the veth pairs, the hosts' addresses, and the
packet filters that partition hosts (nftables, one table per host namespace). Never touches the
machine's own (root) network namespace: the bridge lives in a namespace of its own, each host's veth
pair has one end in the host's namespace and the other on that bridge, and nothing is routed out.

Addresses: every host gets an address in 127.77.0.0/16 on its veth. Loopback-range addresses are
"martian" on a non-loopback device, so each host namespace sets `net.ipv4.conf.*.route_localnet=1`
(a per-namespace sysctl) to accept them. The traffic therefore never carries an address that could
reach anything outside the machine, and dies with the namespaces.

Partitions: `cut(a, b)` drops every packet between a and b (silently, as a real network partition does)
with nftables rules in a's namespace (input and output). `heal()` deletes every rule.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

__all__ = ["Network", "NetnsError", "run_in_netns", "netns_available"]

CLONE_NEWNET = 0x40000000
SUBNET = "127.77"
_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    """A namespace, link or filter could not be set up."""


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def netns_available() -> str | None:
    """None if this process can build the network (root, `ip` and `nft` present, a namespace can be
    made), else why not."""
    if os.geteuid() != 0:
        return "the fault harness needs root (network namespaces)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: install Debian's {package} (`make test` runs scripts/install-system-deps.sh)"
    probe = f"bkprobe-{os.getpid()}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return (f"cannot create a network namespace ({made.stderr.strip()}): a container needs CAP_SYS_ADMIN "
                "and CAP_NET_ADMIN (e.g. docker run --privileged)")
    _run("ip", "netns", "del", probe, check=False)
    return None


def run_in_netns(ns: str, fn, *args):
    """Call fn(*args) in a fresh thread that has joined network namespace `ns`; returns its result.

    Sockets (and threads and child processes) made by fn live in `ns`; the caller's thread is untouched."""
    box: dict = {}

    def body():
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    raise NetnsError(f"setns({ns}): {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
            box["result"] = fn(*args)
        except BaseException as exc:   # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=body, name=f"netns-{ns}", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


@dataclass
class Network:
    """Hosts by name, each in namespace `<prefix>-<name>` with address 127.77.0.<n>.

    Use as a context manager or call `close()`; close removes everything this object created, also after
    a partial `add_host`."""

    prefix: str
    hosts: dict[str, str] = field(default_factory=dict)        # name -> address
    _cuts: dict[str, set[str]] = field(default_factory=dict)   # host -> peers it is cut from
    _namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.switch = f"{self.prefix}-sw"
        self._add_ns(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def _add_ns(self, name: str) -> None:
        if name in _run("ip", "netns", "list").stdout.split():
            _run("ip", "netns", "del", name)        # a leftover of a killed run with our prefix
        _run("ip", "netns", "add", name)
        self._namespaces.append(name)

    def add_host(self, name: str) -> str:
        """Create host `name`; returns its address."""
        index = len(self.hosts) + 1
        if self.ns(name) == self.switch:
            raise NetnsError(f"host name {name!r} is taken by the bridge's namespace")
        if index > 250:
            raise NetnsError("at most 250 hosts")
        ns, address = self.ns(name), f"{SUBNET}.0.{index}"
        self._add_ns(ns)
        port = f"v{index}"
        _run("ip", "link", "add", port, "netns", self.switch, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
             "net.ipv4.conf.default.route_localnet=1", "net.ipv4.conf.eth0.route_localnet=1")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "addr", "add", f"{address}/16", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        self.hosts[name] = address
        return address

    def exec_prefix(self, host: str) -> list[str]:
        """Prefix for a command that must run inside host's namespace (the pid stays the command's own)."""
        return ["ip", "netns", "exec", self.ns(host)]

    # --- partitions ---------------------------------------------------------------------------------
    def cut(self, host: str, peers) -> None:
        """Drop all packets between `host` and each of `peers` (both directions)."""
        peers = [p for p in peers if p != host and p not in self._cuts.get(host, set())]
        if not peers:
            return
        ns = self.ns(host)
        if host not in self._cuts:
            script = ("add table inet faults\n"
                      "add chain inet faults in { type filter hook input priority 0; policy accept; }\n"
                      "add chain inet faults out { type filter hook output priority 0; policy accept; }\n")
            _nft(ns, script)
            self._cuts[host] = set()
        rules = "".join(f"add rule inet faults in ip saddr {self.hosts[p]} drop\n"
                        f"add rule inet faults out ip daddr {self.hosts[p]} drop\n" for p in peers)
        _nft(ns, rules)
        self._cuts[host].update(peers)

    def uncut(self, host: str) -> None:
        """Remove the partitions made by `cut(host, ...)`."""
        if self._cuts.pop(host, None) is not None:
            _run("ip", "netns", "exec", self.ns(host), "nft", "delete", "table", "inet", "faults", check=False)

    def heal(self) -> None:
        """Remove every partition."""
        for host in list(self._cuts):
            self.uncut(host)

    @property
    def cuts(self) -> dict[str, set[str]]:
        return {h: set(p) for h, p in self._cuts.items()}

    # --- teardown -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Delete every namespace this object made (their veths and the bridge go with them)."""
        errors = []
        for name in reversed(self._namespaces):
            proc = _run("ip", "netns", "del", name, check=False)
            if proc.returncode != 0 and "No such file" not in proc.stderr:
                errors.append(f"{name}: {proc.stderr.strip()}")
        self._namespaces.clear()
        self._cuts.clear()
        if errors:
            raise NetnsError("could not delete namespaces: " + "; ".join(errors))

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _nft(ns: str, script: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise NetnsError(f"nft in {ns}: {proc.stderr.strip()}")
