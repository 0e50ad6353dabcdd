#!/usr/bin/env bash
# Regenerate bkfast/proto/*_pb2.py (and .pyi stubs) from bkfast/proto/*.proto.
#
# protoc comes from a pinned grpcio-tools, installed into a throwaway venv under /tmp that is removed
# afterwards; nothing is installed into the project's own environment.
#
# Why this pin: recent protoc writes a runtime check (ValidateProtobufRuntimeVersion) into every
# *_pb2.py; it refuses to load under a protobuf runtime OLDER than the protoc that generated it.
# grpcio-tools 1.76.0 bundles protoc 31.1 (Python gencode 6.31.1), so the generated modules need
# protobuf >= 6.31.1 at run time -- the minimum pinned in pyproject.toml. Raising GRPCIO_TOOLS_VERSION
# means raising that pin to the gencode version printed at the end of this script.
#
# Usage: scripts/gen-proto.sh            (from anywhere; PYTHON=python3.x to pick the interpreter)
set -euo pipefail

GRPCIO_TOOLS_VERSION="1.76.0"
EXPECTED_GENCODE="6.31.1"
PYTHON="${PYTHON:-python3}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
proto_dir="bkfast/proto"
protos=(BookkeeperProtocol.proto DataFormats.proto DbLedgerStorageDataFormats.proto)

venv="$(mktemp -d /tmp/bkfast-gen-proto.XXXXXX)"
trap 'rm -rf "$venv"' EXIT

echo "creating throwaway venv in $venv (grpcio-tools==$GRPCIO_TOOLS_VERSION)"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "grpcio-tools==$GRPCIO_TOOLS_VERSION"

cd "$repo_root"
"$venv/bin/python" -m grpc_tools.protoc \
    -I "$proto_dir" \
    --python_out="$proto_dir" \
    --pyi_out="$proto_dir" \
    "${protos[@]/#/$proto_dir/}"

# protoc writes cross-file imports as top-level modules ("import DataFormats_pb2"); inside the
# bkfast.proto package they must be relative. (The three files do not import each other today;
# this keeps the output importable if that changes.)
for f in "$proto_dir"/*_pb2.py "$proto_dir"/*_pb2.pyi; do
    sed -i -E 's/^import ([A-Za-z0-9_]+_pb2)( as [A-Za-z0-9_]+)?$/from . import \1\2/' "$f"
done

gencode_of() {  # "6.31.1" for a generated module
    grep -A 5 "ValidateProtobufRuntimeVersion(" "$1" | sed -n 3,5p | tr -d ' \n' | sed -E 's/,$//; s/,/./g'
}
for f in "$proto_dir"/*_pb2.py; do
    v="$(gencode_of "$f")"
    if [[ "$v" != "$EXPECTED_GENCODE" ]]; then
        echo "warning: $f has gencode '$v', expected $EXPECTED_GENCODE; update the protobuf pin in pyproject.toml" >&2
    fi
done

echo "generated:"
ls -1 "$proto_dir"/*_pb2.py "$proto_dir"/*_pb2.pyi
echo "gencode version (= minimum protobuf runtime): $(gencode_of "$proto_dir/BookkeeperProtocol_pb2.py")"
