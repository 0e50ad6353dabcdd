"""Named log streams over ledgers (BookKeeper's DistributedLog API, the bkfast way).

A namespace of streams; each stream a sequence of log segments (ledgers) listed in the metadata store;
records batched into entries (`batch.py`) and addressed by DLSN (`position.py`); one writer with fencing
takeover (`writer.py`); readers that tail (`reader.py`); truncation and retention (`namespace.py`).
`Namespace` blocks; `AsyncNamespace` is the Twisted API.
"""

from .batch import DecodedBatch, decode_batch, encode_batch
from .blocking import Namespace, StreamReader, StreamWriter
from .namespace import AsyncNamespace
from .position import DLSN, EARLIEST, LATEST
from .reader import AsyncStreamReader, Record, StreamEntry
from .writer import AsyncStreamWriter, WriterOptions

__all__ = ["AsyncNamespace", "AsyncStreamReader", "AsyncStreamWriter", "DLSN", "DecodedBatch", "EARLIEST", "LATEST",
           "Namespace", "Record", "StreamEntry", "StreamReader", "StreamWriter", "WriterOptions", "decode_batch",
           "encode_batch"]
