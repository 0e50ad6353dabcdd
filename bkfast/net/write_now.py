"""Writing a connection's answers with one send() instead of Twisted's buffer-then-poll round.

Owns: `write_now(transport, data)`. Twisted's `transport.write` only buffers: it registers the socket for
writing (an epoll_ctl), sends on the next reactor iteration, then unregisters it (another epoll_ctl). A
bookie writes one batch of answers per connection per journal group commit or socket read, so that round
was two syscalls and a reactor iteration per batch on the reactor thread (profiled: ~10% of its busy time
under 1 KiB adds). When Twisted holds nothing unsent for a plain TCP connection, the answers are sent at
once; what the socket does not take goes through `transport.write` as before, behind nothing, so the
order of bytes and Twisted's producer pausing (the connection's output bound) are unchanged.

Must never: send ahead of bytes Twisted still holds, or bypass TLS (a connection that started TLS, and
any transport that is not Twisted's plain TCP connection, always goes through `transport.write`).
"""

from __future__ import annotations

from twisted.internet import tcp

__all__ = ["write_now"]


def write_now(transport, data: bytes) -> None:
    """Send `data` now if nothing is queued before it on this plain TCP transport; queue the rest."""
    if (isinstance(transport, tcp.Connection) and not transport.TLS and transport.connected
            and not transport.disconnecting and not transport._writeDisconnected
            and not transport._tempDataLen and transport.offset == len(transport.dataBuffer)):
        try:
            sent = transport.socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0            # Twisted's own send meets the error again and closes the connection
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)
