"""The client's side of START_TLS on a bookie channel (spec §8.1), as Java 4.16's PerChannelBookieClient.

Owns: the channel's TLS phases. Once TCP is up the channel sends the v3 START_TLS request (also on a v2
channel: the first frame is always v3) and holds every request; an EOK answer switches the connection to
TLS with Twisted's `startTLS` (pyOpenSSL), anything else closes it; when the handshake is done the
bookie's name is checked (`tlsHostnameVerificationEnabled`, service_identity) and the held requests go
out inside TLS. A bookie that refuses the client's role sends one more START_TLS reply (EIO) right after
the handshake; it is taken out of the stream here (a v2 channel could not decode it) and logged. START_TLS
and the handshake must finish within `startTLSTimeoutSecs`. Nothing is ever sent in plaintext but the
START_TLS request.

A malformed or missing answer, a timeout and a failed name check reset the connection (`ch.abort`); a bookie
that answers START_TLS with an error status (no TLS configured) is a clean answer, and gets a clean close.
"""

from __future__ import annotations

import logging
import struct

from bkfast.proto import BookkeeperProtocol_pb2 as pb
from bkfast.tls.context import verify_peer_name

log = logging.getLogger(__name__)

__all__ = ["REPLY", "HANDSHAKE", "VERDICT", "begin", "filter_verdict", "handshake_completed", "received"]

START_TLS_REQUEST = bytes.fromhex("0000000b0a06080310091801d20600")
REPLY, HANDSHAKE, VERDICT = "start-tls reply", "tls handshake", "tls verdict"
_LEN = struct.Struct(">I")


def begin(ch) -> None:
    """TCP is up: ask for TLS; requests wait in the channel's core until the handshake is done."""
    ch.tls_phase = REPLY
    ch.tls_buf = b""
    ch.transport.write(START_TLS_REQUEST)
    ch.tls_timer = ch.reactor.callLater(ch.tls_timeout_s, _timed_out, ch)


def _timed_out(ch) -> None:
    ch.tls_timer = None
    if ch.tls_phase in (REPLY, HANDSHAKE):
        ch.abort(f"TLS with bookie {ch.bookie_id} not established within {ch.tls_timeout_s:.0f} s "
                 f"({ch.tls_phase})")


def _cancel(ch) -> None:
    timer, ch.tls_timer = ch.tls_timer, None
    if timer is not None and timer.active():
        timer.cancel()


def received(ch, data: bytes) -> None:
    """Plaintext bytes while waiting for the START_TLS reply."""
    buf = ch.tls_buf + data
    if len(buf) < 4:
        ch.tls_buf = buf
        return
    (n,) = _LEN.unpack_from(buf)
    if n > 1024:
        ch.abort(f"bookie {ch.bookie_id} answered START_TLS with a {n}-byte frame")
        return
    if len(buf) < 4 + n:
        ch.tls_buf = buf
        return
    if len(buf) > 4 + n:
        ch.abort(f"bookie {ch.bookie_id} sent plaintext after its START_TLS reply")
        return
    ch.tls_buf = b""
    try:
        response = pb.Response.FromString(buf[4:])
    except Exception:
        response = None
    if response is None or response.header.operation != pb.START_TLS:
        ch.abort(f"bookie {ch.bookie_id} did not answer START_TLS")
        return
    if response.status != pb.EOK:
        ch.close(f"bookie {ch.bookie_id} refused START_TLS ({pb.StatusCode.Name(response.status)}): "
                 "is TLS configured on it (tlsProviderFactoryClass)?")
        return
    ch.tls_phase = HANDSHAKE
    ch.transport.startTLS(ch.tls)


def handshake_completed(ch) -> None:
    _cancel(ch)
    if ch.tls_phase != HANDSHAKE:
        return
    if ch.tls.settings.verify_hostname:
        why = verify_peer_name(ch.transport.getHandle(), ch.host)
        if why is not None:
            ch.abort(why)
            return
    ch.tls_phase = VERDICT
    ch.tls_ready()


def filter_verdict(ch, frames: list) -> list:
    """Drop the bookie's post-handshake START_TLS reply, if it is the first frame after the handshake."""
    ch.tls_phase = None
    if frames and frames[0][:1] == b"\x0a":
        try:
            response = pb.Response.FromString(bytes(frames[0]))
        except Exception:
            return frames
        if response.header.operation == pb.START_TLS:
            if response.status != pb.EOK:
                log.warning("bookie %s did not authorize this client (START_TLS %s after the handshake): its "
                            "requests will be refused (EUA)", ch.bookie_id, pb.StatusCode.Name(response.status))
            return frames[1:]
    return frames


def connection_lost(ch) -> None:
    _cancel(ch)
