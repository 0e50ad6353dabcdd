#!/usr/bin/env bash
# Installs what the test suite needs from Debian: a ZooKeeper server (package `zookeeper`, whose jars
# land in /usr/share/java), a Java runtime to run it, an etcd server (package `etcd-server`: /usr/bin/etcd,
# for the etcd metadata driver's tests), and for the fault campaign (tests/faults/) `ip` (iproute2: network
# namespaces) and `nft` (nftables: partitions). Does nothing when all are present.
set -euo pipefail

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || need+=(etcd-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
ls /usr/share/java/slf4j-simple*.jar /usr/share/java/slf4j-nop*.jar >/dev/null 2>&1 || need+=(libslf4j-java)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "installing Debian packages: ${need[*]}"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
