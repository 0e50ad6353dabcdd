"""The fault harness itself: partitions really drop packets between namespaces (and only between the
hosts named), and a campaign that fails half-way still leaves no namespace, process or mount behind."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.faults.cluster import FaultCluster
from tests.faults.netns import Network, netns_available, run_in_netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _connects(net: Network, src: str, address: str, port: int) -> bool:
    def attempt():
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return True
        except OSError:
            return False

    return run_in_netns(net.ns(src), attempt)


def test_cut_drops_traffic_between_the_named_hosts_only_and_heal_restores_it():
    assert netns_available() is None, netns_available()
    with Network(f"bkh{os.getpid()}") as net:
        for host in ("a", "b", "c"):
            net.add_host(host)
        listener = run_in_netns(net.ns("b"), lambda: socket.create_server((net.hosts["b"], 0)))
        try:
            port = listener.getsockname()[1]
            assert _connects(net, "a", net.hosts["b"], port)
            net.cut("a", ["b"])
            assert not _connects(net, "a", net.hosts["b"], port)
            assert _connects(net, "c", net.hosts["b"], port)
            net.heal()
            assert _connects(net, "a", net.hosts["b"], port)
        finally:
            listener.close()
        # the machine's own namespace has no address of the harness and cannot reach it
        assert "127.77." not in subprocess.run(["ip", "addr"], capture_output=True, text=True).stdout
    assert not [n for n in _namespaces() if n.startswith(f"bkh{os.getpid()}-")]


def test_a_failing_campaign_leaves_no_namespace_process_or_mount(tmp_path):
    pids = []
    with pytest.raises(RuntimeError, match="campaign failed"):
        with FaultCluster(tmp_path, bookies=1, prefix=f"bkd{os.getpid()}") as cluster:
            bookie = cluster.bookies["b1"]
            pids += [bookie.pid, cluster.zk.pid]
            cluster.pause(bookie.pid)               # a stopped process, a partition and a full disk
            cluster.net.cut("b1", ["zk"])
            cluster.fill_disk()
            raise RuntimeError("campaign failed")
    assert not [n for n in _namespaces() if n.startswith(f"bkd{os.getpid()}-")]
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    with open("/proc/mounts") as mounts:
        assert str(tmp_path) not in mounts.read()
