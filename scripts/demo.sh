#!/usr/bin/env bash
# `make run`'s demo: start one bkfast bookie on 127.0.0.1 (temp dirs, standalone: no ZooKeeper yet),
# drive it with `bkfast bench bookie` over the v2 and v3 protocols, then stop it with SIGTERM.
# The local 3-bookie cluster with metadata (`bkfast sandbox`) replaces this once the client lands.
set -euo pipefail

BKFAST="${BKFAST:-.venv/bin/bkfast}"
data_dir="$(mktemp -d /tmp/bkfast-demo.XXXXXX)"
out="$data_dir/bookie.out"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$data_dir"
}
trap cleanup EXIT

"$BKFAST" bookie --no-metadata --port 0 \
  -D listeningInterface=127.0.0.1 \
  -D journalDirectory="$data_dir/journal" -D ledgerDirectories="$data_dir/ledgers" \
  -D ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage \
  -D dbStorage_writeCacheMaxSizeMb=64 -D dbStorage_readAheadCacheMaxSizeMb=64 \
  >"$out" 2>"$data_dir/bookie.log" &
pid=$!

for _ in $(seq 1 300); do
  if grep -q "bookie listening on" "$out" 2>/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat "$data_dir/bookie.log" >&2; exit 1; fi
  sleep 0.1
done
address="$(sed -n 's/^bookie listening on //p' "$out")"
[ -n "$address" ] || { echo "bookie did not start" >&2; cat "$data_dir/bookie.log" >&2; exit 1; }
echo "bkfast bookie running at $address (data in $data_dir)"

for protocol in v2 v3; do
  echo "--- bkfast bench bookie --protocol $protocol"
  "$BKFAST" bench bookie --bookie "$address" --protocol "$protocol" \
    --latency-count 500 --throughput-count 50000 --outstanding 2000 --size 1024
done

kill -TERM "$pid"
wait "$pid"
echo "bookie stopped cleanly (SIGTERM: in-flight adds drained, storage flushed, checkpoint written)"
pid=""
