"""Protobuf schemas shared with Apache BookKeeper, and their generated Python modules.

What lives here:

* ``BookkeeperProtocol.proto`` / ``BookkeeperProtocol_pb2`` -- the v3 wire protocol: every frame is a
  4-byte big-endian length followed by one serialized ``Request`` (client -> bookie) or ``Response``
  (bookie -> client). bkfast's only addition is ``optional int64 ledgerScopeId = 1000`` on the
  per-ledger requests/responses (Add, Read, WriteLac, ReadLac, ForceLedger, GetListOfEntriesOfLedger):
  the high 64 bits of a 128-bit ledger id. Absent means scope 0, and for scope 0 the field must be
  left *unset* (proto2 presence: an explicit 0 is still written) so frames stay byte-identical to Java.
* ``DataFormats.proto`` / ``DataFormats_pb2`` -- ZooKeeper metadata: ``LedgerMetadataFormat`` (ledger
  metadata format 2 as text, format 3 as varint-delimited binary), ``CookieFormat``,
  ``BookieServiceInfoFormat`` (bookie registration), the under-replication/auditor formats.
* ``DbLedgerStorageDataFormats.proto`` / ``DbLedgerStorageDataFormats_pb2`` -- ``LedgerData``, the value
  stored per ledger in DbLedgerStorage's ``ledgers`` RocksDB store.

Names, field numbers and options match upstream (no ``package``, so message full names are bare:
``Request``, ``LedgerMetadataFormat``, ...).

Regenerating: edit the ``.proto`` files, then run ``scripts/gen-proto.sh``. It installs a pinned
``grpcio-tools`` into a throwaway venv under /tmp and rewrites the ``*_pb2.py``/``*_pb2.pyi`` files
here. The generated code checks at import time that the protobuf runtime is not older than
:data:`GENCODE_PROTOBUF_VERSION`; pyproject.toml pins at least that version. Never edit the
``*_pb2`` files by hand.
"""

from __future__ import annotations

from . import BookkeeperProtocol_pb2, DataFormats_pb2, DbLedgerStorageDataFormats_pb2
from .BookkeeperProtocol_pb2 import (
    BKPacketHeader,
    OperationType,
    ProtocolVersion,
    Request,
    Response,
    StatusCode,
)
from .DataFormats_pb2 import BookieServiceInfoFormat, CookieFormat, LedgerMetadataFormat
from .DbLedgerStorageDataFormats_pb2 import LedgerData

#: protobuf version of the generated code (grpcio-tools pin in scripts/gen-proto.sh); the minimum
#: protobuf runtime that can import these modules.
GENCODE_PROTOBUF_VERSION = "6.31.1"

#: Field number of bkfast's ``ledgerScopeId`` extension field in the v3 protocol messages.
LEDGER_SCOPE_ID_FIELD_NUMBER = 1000

__all__ = [
    "BookkeeperProtocol_pb2",
    "DataFormats_pb2",
    "DbLedgerStorageDataFormats_pb2",
    "BKPacketHeader",
    "OperationType",
    "ProtocolVersion",
    "Request",
    "Response",
    "StatusCode",
    "BookieServiceInfoFormat",
    "CookieFormat",
    "LedgerMetadataFormat",
    "LedgerData",
    "GENCODE_PROTOBUF_VERSION",
    "LEDGER_SCOPE_ID_FIELD_NUMBER",
]
