"""What every admin operation shares: the operator-error type, ledger references, the checks of ids an
operator types (bookie ids, ledger and entry ids), the ZooKeeper session of a command and the bridge from a
blocking caller to the client's reactor."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bkfast.errors import AdminError, BKError, ConfigurationError, InvalidLedgerIdError
from bkfast.ids import LedgerId, validate_ledger_id, validate_scope_id

__all__ = ["AdminError", "LedgerRef", "Progress", "ledger_ref", "zk_session", "zk_target", "in_reactor",
           "OPERATOR_ERRORS", "check_bookie_id", "parse_id"]

Progress = Callable[[int, "int | None"], None]
"""progress(done, total): called as a long operation advances (total None when unknown)."""


def _operator_errors() -> tuple[type[BaseException], ...]:
    from bkfast.meta import MetadataError

    return (AdminError, MetadataError, BKError, ConfigurationError, OSError)


OPERATOR_ERRORS = _operator_errors()
"""Exceptions whose message is meant for an operator (faces print it in one line; other ones are bugs)."""


@dataclass(frozen=True)
class LedgerRef:
    """A ledger as an operator names it: an id (scope 0 unless a scope id is given) or a qualified name."""

    ledger: LedgerId

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def scope_id(self) -> int:
        return self.ledger.scope_id

    def __str__(self) -> str:
        return str(self.ledger)


def ledger_ref(ledger_id: int | None = None, scope_id: int | None = None,
               qualified_name: str | None = None) -> LedgerRef:
    """BP-34's three ways: `ledger_id` (+ `scope_id`), or `qualified_name` (32 hex digits) alone."""
    try:
        if qualified_name is not None:
            if ledger_id is not None or scope_id is not None:
                raise AdminError("give either a ledger id (with --ledger-scope-id) or --ledger-qualified-name, "
                                 "not both")
            return LedgerRef(LedgerId.parse_qualified_name(qualified_name))
        if ledger_id is None:
            raise AdminError("no ledger given: pass a ledger id or --ledger-qualified-name")
        return LedgerRef(LedgerId(validate_scope_id(scope_id or 0), validate_ledger_id(ledger_id)))
    except InvalidLedgerIdError as err:
        raise AdminError(str(err)) from None


# Java's BookieId.validateBookieId pattern as it is: ":-_" is a range (":" to "_"), so "@", "[" and "]" (a
# bracketed IPv6 host) pass as they do in Java, and "/" never does.
_BOOKIE_ID = re.compile(r"[a-zA-Z0-9:-_.\-]+")
_DECIMAL = re.compile(r"-?[0-9]+")


def check_bookie_id(text: str) -> str:
    """A bookie id as BookKeeper's BookieId accepts it, returned unchanged; AdminError otherwise. The id
    becomes a znode name (cookies/<id>, available/<id>): "readonly" is available/'s read-only folder, and
    ZooKeeper refuses "." and ".." as names, so neither names a bookie."""
    if not _BOOKIE_ID.fullmatch(text) or text in ("readonly", ".", ".."):
        raise AdminError(f"invalid bookie id {text!r}: a bookie id is host:port, or a name of letters, digits "
                         "and '.-_:' (no '/'), and not 'readonly', '.' or '..'")
    return text


def parse_id(text: str, what: str, high: int, low: int = 0) -> int:
    """An id an operator typed, from ASCII decimal digits only: int() also reads " +1_0" as 10 and U+0661
    (ARABIC-INDIC DIGIT ONE) as 1, so a slip could name another ledger. AdminError names `what`."""
    if _DECIMAL.fullmatch(text) and low <= int(text) <= high:
        return int(text)
    raise AdminError(f"invalid {what} {text!r}: give an integer in ASCII digits (0-9), from {low} to {high}")


def zk_target(metadata_uri: str) -> tuple[str, str, str]:
    """(connect string, ledgers root, layout) of a ZooKeeper metadata URI; AdminError for anything else."""
    from bkfast.meta import MetadataError, parse_metadata_service_uri

    if metadata_uri.lower().startswith("embedded:"):
        raise AdminError(f"{metadata_uri}: embedded metadata is served by the one process that opened it; "
                         "start the sandbox with --zk and use its zk+hierarchical://host:port/ledgers URI")
    try:
        return parse_metadata_service_uri(metadata_uri)
    except MetadataError as err:
        raise AdminError(str(err)) from None


def confirm_nuke(root: str, actual_instance_id: str | None, given: str | None, force: bool) -> None:
    """nukeexistingcluster's guard, whatever the store: `force`, or the cluster's own instance id (so a typo in
    the root cannot wipe another cluster); AdminError otherwise."""
    if force:
        return
    if given is None:
        raise AdminError(f"refusing to delete {root}: pass --instance-id {actual_instance_id or '<id>'} "
                         "(see whatisinstanceid) or --force")
    if given != actual_instance_id:
        raise AdminError(f"refusing to delete {root}: its instance id is {actual_instance_id}, not {given}")


@contextlib.contextmanager
def zk_session(hosts: str, timeout_s: float) -> Iterator:
    """A started kazoo client, stopped and closed on exit; AdminError naming the hosts if it cannot connect."""
    from kazoo.handlers.threading import KazooTimeoutError

    from bkfast.meta.zk_client import make_zk_client, quiet_connect_attempts

    # A command's session ends by design when it is done: no line about it.
    zk = make_zk_client(hosts, timeout_s, log_states=False)
    # kazoo's line per refused attempt shows under --verbose (INFO) only; the error below says it once.
    with quiet_connect_attempts(zk, shown_from=logging.INFO) as attempts:
        try:
            zk.start(timeout=timeout_s)
        except KazooTimeoutError:
            zk.close()
            cause = f" ({attempts[0]})" if attempts else ""
            raise AdminError(f"cannot connect to ZooKeeper at {hosts} within {timeout_s:g} s{cause}: is it "
                             "running? (check metadataServiceUri / --metadata-uri)") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def in_reactor(timeout_s: float, fn, *args, **kwargs):
    """Run `fn(*args)` (which may return a Deferred or a coroutine) on the client's reactor thread and wait."""
    from bkfast.client.blocking import call_in_reactor

    return call_in_reactor(timeout_s, fn, *args, **kwargs)
