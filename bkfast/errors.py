"""One exception hierarchy for bkfast, and the single table mapping each error to its wire codes.

Every error is a `BKError` with a client code (the numbering of Java's `BKException.Code`). Errors a
bookie reports on the wire also carry the v2 return code (`int rc` of the binary protocol) and the v3
`StatusCode`; `ERROR_TABLE` holds those three numbers for each error, and the lookup helpers below are
the only place where codes are translated. This module is a leaf: it imports nothing from bkfast.
"""

from __future__ import annotations

import enum


class V2Rc(enum.IntEnum):
    """Return codes of the v2 binary protocol (BookieProtocol)."""

    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107


class V3Status(enum.IntEnum):
    """StatusCode of the v3 protobuf protocol."""

    EOK = 0
    ENOLEDGER = 402
    ENOENTRY = 403
    EBADREQ = 404
    EIO = 501
    EUA = 502
    EBADVERSION = 503
    EFENCED = 504
    EREADONLY = 505
    ETOOMANYREQUESTS = 506
    EUNKNOWNLEDGERSTATE = 507


class ClientCode(enum.IntEnum):
    """Java's BKException.Code numbering, kept so logs and tools read the same in both worlds."""

    OK = 0
    ReadException = -1
    QuorumException = -2
    NoBookieAvailableException = -3
    DigestNotInitializedException = -4
    DigestMatchException = -5
    NotEnoughBookiesException = -6
    NoSuchLedgerExistsException = -7
    BookieHandleNotAvailableException = -8
    ZKException = -9
    LedgerRecoveryException = -10
    LedgerClosedException = -11
    WriteException = -12
    NoSuchEntryException = -13
    IncorrectParameterException = -14
    InterruptedException = -15
    ProtocolVersionException = -16
    MetadataVersionException = -17
    MetaStoreException = -18
    ClientClosedException = -19
    LedgerExistException = -20
    AddEntryQuorumTimeoutException = -21
    DuplicateEntryIdException = -22
    TimeoutException = -23
    SecurityException = -24
    IllegalOpException = -100
    LedgerFencedException = -101
    UnauthorizedAccessException = -102
    UnclosedFragmentException = -103
    WriteOnReadOnlyBookieException = -104
    TooManyRequestsException = -105
    LedgerIdOverflowException = -106
    ReplicationException = -200
    UnexpectedConditionException = -999


class BKError(Exception):
    """Base of every bkfast error. `code` is the client code (ClientCode)."""

    code: int = ClientCode.UnexpectedConditionException

    def __init__(self, message: str | None = None):
        super().__init__(message or self.__class__.__doc__.strip().splitlines()[0])


# --- errors a bookie reports on the wire ------------------------------------------------------------


class BKReadException(BKError):
    """Error while reading ledger."""

    code = ClientCode.ReadException


class BKWriteException(BKError):
    """Write failed on bookie."""

    code = ClientCode.WriteException


class BKNoSuchLedgerExistsException(BKError):
    """No such ledger exists."""

    code = ClientCode.NoSuchLedgerExistsException


class BKNoSuchEntryException(BKError):
    """No such entry."""

    code = ClientCode.NoSuchEntryException


class BKIllegalOpException(BKError):
    """Invalid operation (a malformed or unsupported request)."""

    code = ClientCode.IllegalOpException


class BKBookieIOException(BKError):
    """I/O error on the bookie (or a fence that could not be made durable)."""

    code = ClientCode.WriteException


class BKUnauthorizedAccessException(BKError):
    """Attempted to access ledger using the wrong password (master key)."""

    code = ClientCode.UnauthorizedAccessException


class BKProtocolVersionException(BKError):
    """Bookie protocol version on server is incompatible with client."""

    code = ClientCode.ProtocolVersionException


class BKLedgerFencedException(BKError):
    """Ledger has been fenced off. Some other client must have opened it to read."""

    code = ClientCode.LedgerFencedException


class BKWriteOnReadOnlyBookieException(BKError):
    """Attempting to write on a read-only bookie."""

    code = ClientCode.WriteOnReadOnlyBookieException


class BKTooManyRequestsException(BKError):
    """Too many requests to the same bookie."""

    code = ClientCode.TooManyRequestsException


class AdminBusyError(BKTooManyRequestsException):
    """The admin HTTP API's queue of requests waiting for a handler is full (answered 503, Retry-After)."""


class BKUnknownLedgerStateException(BKError):
    """Ledger is in limbo on the bookie: its state is unknown."""

    code = ClientCode.ReadException


# --- client-side errors ----------------------------------------------------------------------------


class BKDigestMatchException(BKError):
    """Entry digest does not match."""

    code = ClientCode.DigestMatchException


class BKNotEnoughBookiesException(BKError):
    """Not enough non-faulty bookies available."""

    code = ClientCode.NotEnoughBookiesException


class PlacementPolicyError(BKNotEnoughBookiesException):
    """No ensemble of the available bookies meets the enforced placement policy (racks, regions or zones
    per write quorum); Java reports it as BKNotEnoughBookiesException, and so does its code."""


class BKBookieHandleNotAvailableException(BKError):
    """Bookie handle is not available."""

    code = ClientCode.BookieHandleNotAvailableException


class BKZKException(BKError):
    """Error while using ZooKeeper."""

    code = ClientCode.ZKException


class BKMetaStoreException(BKError):
    """Error while using the metadata store."""

    code = ClientCode.MetaStoreException


class BKLedgerRecoveryException(BKError):
    """Error while recovering ledger."""

    code = ClientCode.LedgerRecoveryException


class BKLedgerClosedException(BKError):
    """Attempt to write to a closed ledger."""

    code = ClientCode.LedgerClosedException


class BKIncorrectParameterException(BKError):
    """Incorrect parameter input."""

    code = ClientCode.IncorrectParameterException


class BKMetadataVersionException(BKError):
    """Bad ledger metadata version (a concurrent update won)."""

    code = ClientCode.MetadataVersionException


class BKClientClosedException(BKError):
    """BookKeeper client is closed."""

    code = ClientCode.ClientClosedException


class BKLedgerExistException(BKError):
    """Ledger existed."""

    code = ClientCode.LedgerExistException


class BKAddEntryQuorumTimeoutException(BKError):
    """Add entry quorum wait timed out."""

    code = ClientCode.AddEntryQuorumTimeoutException


class BKDuplicateEntryIdException(BKError):
    """Attempted to add a duplicate entry id."""

    code = ClientCode.DuplicateEntryIdException


class BKTimeoutException(BKError):
    """Bookie operation timeout."""

    code = ClientCode.TimeoutException


class BKSecurityException(BKError):
    """Failed to establish a secure connection."""

    code = ClientCode.SecurityException


class BKUnclosedFragmentException(BKError):
    """Attempting to use an unclosed fragment; this is not safe."""

    code = ClientCode.UnclosedFragmentException


class BKLedgerIdOverflowException(BKError):
    """Next ledger id is too large."""

    code = ClientCode.LedgerIdOverflowException


class BKReplicationException(BKError):
    """Errors in replication pipeline."""

    code = ClientCode.ReplicationException


class ReplicationUnavailableError(BKReplicationException):
    """Java's ReplicationException.UnavailableException (e.g. disabling twice, an unknown store format)."""


class BKUnexpectedConditionException(BKError):
    """Unexpected condition."""

    code = ClientCode.UnexpectedConditionException


class EntryTooLargeError(BKIllegalOpException):
    """An entry (or a stream record) is larger than a bookie accepts in one frame (nettyMaxFrameSizeBytes
    less the add request's framing); it was refused before anything was sent."""


# Short names used throughout the client API (the issue texts and README speak of these).
BKNoSuchLedgerExists = BKNoSuchLedgerExistsException
BKLedgerFenced = BKLedgerFencedException
BKNotEnoughBookies = BKNotEnoughBookiesException
BKLedgerClosed = BKLedgerClosedException


# --- codec errors: malformed entries and frames ----------------------------------------------------


class EntryVerificationError(BKDigestMatchException):
    """An entry failed verification (digest, ids or layout); the client treats it as a digest mismatch."""


class DigestMismatchError(EntryVerificationError):
    """The entry's digest does not match its header and payload."""


class LedgerIdMismatchError(EntryVerificationError):
    """The entry carries another ledger id than the one asked for."""


class EntryIdMismatchError(EntryVerificationError):
    """The entry carries another entry id than the one asked for."""


class TruncatedEntryError(EntryVerificationError):
    """The buffer is shorter than an entry header plus its digest."""


class EntryFormatError(EntryVerificationError):
    """The entry's format byte is not one bkfast knows (bad revision or digest type)."""


class FrameError(BKIllegalOpException):
    """A frame on the wire is malformed; the connection that sent it should be closed."""

    frames: list        # set by the frame splitter that raised it: the whole frames before the bad one


class FrameTooLargeError(FrameError):
    """A frame's length prefix exceeds the maximum frame size (nettyMaxFrameSizeBytes)."""


class NegativeFrameLengthError(FrameError):
    """A frame's length prefix is negative."""


class MalformedFrameError(FrameError):
    """A frame's body is too short or too long for its opcode."""


class UnknownOpcodeError(FrameError):
    """A v2 frame names an opcode the v2 protocol does not carry."""


class BadProtocolVersionError(BKProtocolVersionException):
    """A v2 frame carries a protocol version outside 0..2."""


# --- local errors ----------------------------------------------------------------------------------


class ConfigurationError(BKIncorrectParameterException, ValueError):
    """A configuration key has a value of the wrong type or outside its range."""


class WorkerPythonError(BKIncorrectParameterException, ImportError):
    """The Python running a Spark worker lacks bkfast's dependencies (PYSPARK_PYTHON names another one)."""


class InvalidLedgerIdError(BKIncorrectParameterException, ValueError):
    """A ledger id, scope id or qualified name is malformed or out of range."""


class JournalCorruptionError(BKBookieIOException):
    """A journal file holds a record no writer produces, with data after it (not a torn tail).

    `path` and `offset` name the file and the offset of the bad record (None when not known).
    """

    def __init__(self, message: str | None = None, path: str | None = None, offset: int | None = None):
        super().__init__(message)
        self.path = path
        self.offset = offset


class WriteCacheFullError(BKTooManyRequestsException):
    """The ledger storage write cache is full and its flush did not free room in time."""


class StorageBusyError(BKTooManyRequestsException):
    """The bookie cannot take an add now without waiting (write cache or journal queue full). Only the
    network server sees it: it holds the add, stops reading that connection, and offers the add again
    when room is announced (ETOOMANYREQUESTS after dbStorage_maxThrottleTimeMs)."""


class StorageCorruptionError(BKBookieIOException):
    """Stored data (entry log or index) is not what its location or header says it is."""


class ReactorTimeoutError(BKTimeoutException, TimeoutError):
    """A call handed to the reactor thread (bkfast.reactor) did not finish in time."""


# --- metadata errors (ZooKeeper layout, cookies, registration): a message meant for an operator -------


class MetadataError(BKMetaStoreException, RuntimeError):
    """A metadata (ZooKeeper / cookie / registration) problem with a message meant for an operator."""


class ClusterExistsError(MetadataError):
    """initnewcluster / metaformat refused: the cluster's root already exists."""


class CookieError(MetadataError):
    """A cookie is missing, unreadable, or inconsistent between places."""


class CookieMismatchError(CookieError):
    """A stored cookie does not match this bookie's configuration."""


class BookieIdInUseError(MetadataError):
    """Another live bookie (ZooKeeper session) holds this bookie id's registration."""


class InvalidBookieIdError(MetadataError, ValueError):
    """A bookie id is not host:port with a port in 1..65535."""


class ZooKeeperServerError(BKZKException, RuntimeError):
    """A local ZooKeeper server (sandbox, tests) could not be located, started or stopped."""


class EtcdServerError(BKMetaStoreException, RuntimeError):
    """A local etcd server (sandbox, tests) could not be located, started or stopped."""


class StreamError(BKIncorrectParameterException):
    """A named log stream operation was refused (bad name, bad position, bad option)."""


class NoSuchStreamError(StreamError):
    """The named log stream does not exist."""


class StreamExistsError(StreamError):
    """A log stream of that name already exists."""


class StreamFencedError(BKLedgerFencedException):
    """Another writer took over the log stream; this writer can no longer append."""


class StreamWriterStoppedError(BKWriteException):
    """The log stream's writer gave up: its segments kept failing while no write succeeded."""


# --- the one table of wire codes -------------------------------------------------------------------
# (error class, v2 rc, v3 status). EOK is absent: success is not an error.
ERROR_TABLE: tuple[tuple[type[BKError], V2Rc, V3Status], ...] = (
    (BKNoSuchLedgerExistsException, V2Rc.ENOLEDGER, V3Status.ENOLEDGER),
    (BKNoSuchEntryException, V2Rc.ENOENTRY, V3Status.ENOENTRY),
    (BKIllegalOpException, V2Rc.EBADREQ, V3Status.EBADREQ),
    (BKBookieIOException, V2Rc.EIO, V3Status.EIO),
    (BKUnauthorizedAccessException, V2Rc.EUA, V3Status.EUA),
    (BKProtocolVersionException, V2Rc.EBADVERSION, V3Status.EBADVERSION),
    (BKLedgerFencedException, V2Rc.EFENCED, V3Status.EFENCED),
    (BKWriteOnReadOnlyBookieException, V2Rc.EREADONLY, V3Status.EREADONLY),
    (BKTooManyRequestsException, V2Rc.ETOOMANYREQUESTS, V3Status.ETOOMANYREQUESTS),
    (BKUnknownLedgerStateException, V2Rc.EUNKNOWNLEDGERSTATE, V3Status.EUNKNOWNLEDGERSTATE),
)

_BY_V2 = {v2: cls for cls, v2, _ in ERROR_TABLE}
_BY_V3 = {v3: cls for cls, _, v3 in ERROR_TABLE}
_V2_TO_V3 = {v2: v3 for _, v2, v3 in ERROR_TABLE}
_V3_TO_V2 = {v3: v2 for _, v2, v3 in ERROR_TABLE}


def error_for_v2_rc(rc: int, context: str = "") -> BKError | None:
    """The error a v2 response code stands for (None for EOK)."""
    if rc == V2Rc.EOK:
        return None
    cls = _BY_V2.get(rc)
    if cls is None:
        return BKUnexpectedConditionException(f"unknown v2 return code {rc}{': ' + context if context else ''}")
    return cls(f"{cls.__doc__.strip().splitlines()[0]} (v2 rc {rc}){': ' + context if context else ''}")


def error_for_v3_status(status: int, context: str = "") -> BKError | None:
    """The error a v3 StatusCode stands for (None for EOK)."""
    if status == V3Status.EOK:
        return None
    cls = _BY_V3.get(status)
    if cls is None:
        return BKUnexpectedConditionException(
            f"unknown v3 status {status}{': ' + context if context else ''}"
        )
    return cls(f"{cls.__doc__.strip().splitlines()[0]} (v3 status {status}){': ' + context if context else ''}")


def _wire_row(exc: BaseException | type) -> tuple[V2Rc, V3Status]:
    cls = exc if isinstance(exc, type) else type(exc)
    for row_cls, v2, v3 in ERROR_TABLE:
        if issubclass(cls, row_cls):
            return v2, v3
    # Anything a bookie did not classify is reported the way Java reports unexpected exceptions.
    return V2Rc.EIO, V3Status.EIO


def v2_rc_for(exc: BaseException | type) -> V2Rc:
    """The v2 return code a bookie sends for an error (EIO when the error has no wire code)."""
    return _wire_row(exc)[0]


def v3_status_for(exc: BaseException | type) -> V3Status:
    """The v3 StatusCode a bookie sends for an error (EIO when the error has no wire code)."""
    return _wire_row(exc)[1]


def v2_rc_to_v3(rc: int) -> V3Status:
    if rc == V2Rc.EOK:
        return V3Status.EOK
    return _V2_TO_V3[rc]


def v3_status_to_v2(status: int) -> V2Rc:
    if status == V3Status.EOK:
        return V2Rc.EOK
    return _V3_TO_V2[status]


def ledger_name(scope_id: int, ledger_id: int) -> str:
    """How messages name a ledger: "ledger 7", or "ledger 7 (scope 3)" for a scoped one."""
    return f"ledger {ledger_id}" + (f" (scope {scope_id})" if scope_id else "")


def missing_entry_error(ledger_known: bool, scope_id: int, ledger_id: int, entry_id: int) -> BKError:
    """A storage's answer to a read of an entry it does not have: no such ledger, or no such entry."""
    if not ledger_known:
        return BKNoSuchLedgerExistsException(
            f"No such ledger exists: {ledger_name(scope_id, ledger_id)} is not on this bookie")
    return BKNoSuchEntryException(f"No such entry: entry {entry_id} of {ledger_name(scope_id, ledger_id)}")


class AdminError(RuntimeError):
    """An admin operation (shell, HTTP admin API) refused or failed for a reason the operator can act on;
    the message is one line."""


class ReplayInterrupted(Exception):
    """Journal replay stopped because its visitor raised (ledger storage took no more): `mark` is the
    position after the last record it took (replay resumes there), `__cause__` what it raised."""

    def __init__(self, mark, cause: BaseException):
        super().__init__(f"journal replay stopped at {tuple(mark)}: {cause}")
        self.mark = mark
        self.__cause__ = cause


class BkfastSparkError(ValueError):
    """A mistake in how the bkfast Spark data source is used (one line: what is wrong and what to do)."""
