"""START_TLS and the authentication gate of a bookie connection (spec §8.1, §8.2).

Owns: the bookie's answer to a v3 START_TLS request (EOK written in plaintext, then the connection
switches to TLS through Twisted's `startTLS`, i.e. pyOpenSSL in a TLSMemoryBIOProtocol; EBADREQ on a
bookie without TLS), the handshake timeout (`tlsHandshakeTimeoutMs`, Netty's 10 s), the verdict of
`bookieAuthProviderFactoryClass` once the handshake is done (an unauthorized client gets an encrypted
EIO START_TLS reply, is logged once per certificate subject, and every later request gets EUA), and the
gate itself: while a connection is not authenticated, each request is answered EUA (v3 status or v2 rc
102) one frame at a time; plaintext frames that follow a START_TLS close the connection, as Netty's
SslHandler does.

The connection (bkfast.net.server) only asks `conn.gate is not None` once per run of frames; everything
else of TLS lives here. Output bounds still hold under TLS: Twisted moves the connection's streaming
producer registration to the TLS protocol, which pauses it when the socket's buffer fills.
"""

from __future__ import annotations

import logging

from bkfast.codec import decode_request
from bkfast.errors import BKError, FrameError, V2Rc, V3Status
from bkfast.net import v2_handler, v3_handler
from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.tls.authz import authorizer_from_conf
from bkfast.tls.context import ServerTLS, tls_enabled

log = logging.getLogger(__name__)

__all__ = ["ServerSecurity", "gated", "handshake_completed", "start_tls"]

UNAUTHENTICATED = "unauthenticated"   # bookieAuthProviderFactoryClass set and no verdict (or a bad one)
UPGRADING = "upgrading"               # START_TLS answered, handshake not done
MAX_LOGGED_SUBJECTS = 10000           # refused certificate subjects remembered (each is logged once)


class ServerSecurity:
    """The TLS context and the authorizer of one bookie server (None parts are off)."""

    def __init__(self, tls: ServerTLS | None, authorizer, handshake_timeout_s: float):
        self.tls = tls
        self.authorizer = authorizer
        self.handshake_timeout_s = handshake_timeout_s
        self.refused_subjects: set[str] = set()

    @classmethod
    def from_conf(cls, conf) -> ServerSecurity | None:
        tls = ServerTLS(conf) if tls_enabled(conf) else None
        authorizer = authorizer_from_conf(conf)
        if tls is None and authorizer is None:
            return None
        if authorizer is not None and tls is None:
            log.warning("bookieAuthProviderFactoryClass is set but TLS is not (tlsProviderFactoryClass): no client "
                        "can be authorized, every request will get EUA")
        return cls(tls, authorizer, conf.get("tlsHandshakeTimeoutMs") / 1000.0)

    def initial_gate(self) -> str | None:
        return UNAUTHENTICATED if self.authorizer is not None else None


def gated(conn, frames: list, i: int) -> int:
    """Handle frames[i] of a connection that is not open for requests; returns the next index."""
    if conn.gate == UPGRADING:
        conn.close("plaintext data after START_TLS (expected a TLS handshake)")
        return len(frames)
    frame = frames[i]
    if not conn.v2:
        request = v3_handler.parse_request(frame)
        if request is None:
            conn.v2 = True
        else:
            if request.header.operation == pb.START_TLS:
                start_tls(conn, request, v3_handler._Reply(conn, request))
            else:
                v3_handler._Reply(conn, request).send(V3Status.EUA)
            return i + 1
    try:
        r = decode_request(frame)
    except (FrameError, BKError, ValueError) as err:
        conn.close(f"undecodable v2 frame: {err}")
        return len(frames)
    v2_handler.error(conn, r, V2Rc.EUA)
    return i + 1


def start_tls(conn, request, reply) -> None:
    """v3 START_TLS: EOK in plaintext, then TLS (the client's ClientHello comes next)."""
    security = conn.factory.security
    if security is None or security.tls is None or conn.gate == UPGRADING or conn.tls_done:
        reply.send(V3Status.EBADREQ)
        return
    response = pb.Response(status=V3Status.EOK)
    response.header.version = pb.VERSION_THREE
    response.header.operation = pb.START_TLS
    response.header.txnId = request.header.txnId
    response.startTLSResponse.SetInParent()
    conn.out.add_frame(response.SerializeToString())
    conn.flush()                           # everything so far leaves in plaintext
    conn.start_tls_request = request
    conn.gate = UPGRADING
    conn.transport.startTLS(security.tls)
    _coalesce_reads(conn, conn.transport.protocol)
    timeout = security.handshake_timeout_s
    conn.tls_timer = conn.factory.reactor.callLater(timeout, _handshake_timed_out, conn)
    if conn.splitter.buffered_bytes:
        conn.close("plaintext data after START_TLS (expected a TLS handshake)")


def _coalesce_reads(conn, tls_protocol) -> None:
    """Hand the connection everything one socket read decrypted to, in one call.

    Twisted's TLS protocol delivers each TLS record (at most 16 KiB) separately; the connection batches
    the ADDs of one delivery, so without this a 256 KiB socket read of 1 KiB adds became 16 batches.
    """
    deliver = tls_protocol.dataReceived

    def data_received(data):
        conn.tls_chunks = chunks = []
        try:
            deliver(data)
        finally:
            conn.tls_chunks = None
        if chunks and conn.connected:
            conn.dataReceived(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    tls_protocol.dataReceived = data_received


def _handshake_timed_out(conn) -> None:
    conn.tls_timer = None
    if conn.connected and conn.gate == UPGRADING:
        log.warning("closing connection from %s: TLS handshake not done %.1f s after START_TLS",
                    conn.peer, conn.factory.security.handshake_timeout_s)
        conn.connected = False
        conn.transport.abortConnection()


def cancel_timer(conn) -> None:
    timer, conn.tls_timer = conn.tls_timer, None
    if timer is not None and timer.active():
        timer.cancel()


def handshake_completed(conn) -> None:
    """The TLS handshake ended well: authorize (if configured) and open the connection."""
    cancel_timer(conn)
    conn.tls_done = True
    security = conn.factory.security
    authorizer = security.authorizer
    if authorizer is None:
        conn.gate = None
        log.debug("connection from %s is TLS-protected", conn.peer)
        return
    peer = conn.transport.getPeerCertificate()
    cert = peer.to_cryptography() if peer is not None else None
    why = authorizer.check(cert)
    if why is None:
        conn.gate = None
        log.debug("connection from %s authorized (%s)", conn.peer, cert.subject.rfc4514_string())
        return
    conn.gate = UNAUTHENTICATED
    subject = cert.subject.rfc4514_string() if cert is not None else "(no certificate)"
    if subject not in security.refused_subjects:
        if len(security.refused_subjects) < MAX_LOGGED_SUBJECTS:
            security.refused_subjects.add(subject)
        log.warning("unauthorized client %s (certificate subject %s): %s; its requests get EUA",
                    conn.peer, subject, why)
    response = pb.Response(status=V3Status.EIO)
    response.header.CopyFrom(conn.start_tls_request.header)
    conn.out.add_frame(response.SerializeToString())
    conn.respond()


def connection_lost(conn, reason) -> None:
    cancel_timer(conn)
    if conn.gate == UPGRADING and reason is not None:
        log.warning("TLS handshake with %s failed: %s", conn.peer, reason.getErrorMessage())
