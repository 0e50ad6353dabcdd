"""BookKeeper's `/api/v1/autorecovery/...` admin endpoints (spec §9.2), over bkfast.replication.admin_ops.

  GET|PUT /api/v1/autorecovery/status                        PUT ?enabled=true|false -> {"enabled": b}
  PUT     /api/v1/autorecovery/bookie                        {"bookie_src": [id], "delete_cookie": b}: recover (async)
  GET     /api/v1/autorecovery/list_under_replicated_ledger  missingreplica, excludingmissingreplica,
                                                             printmissingreplica; none marked -> 404
  GET     /api/v1/autorecovery/who_is_auditor                "Auditor: <id>"; none -> 404
  PUT     /api/v1/autorecovery/trigger_audit                 disabled or no auditor -> 404
  GET|PUT /api/v1/autorecovery/lost_bookie_recovery_delay    PUT {"delay_seconds": n}
  PUT     /api/v1/autorecovery/decommission                  {"bookie_src": id}: decommission (async)

The two long operations run in a background thread; their outcome goes to the bookie's log (as Java's).
`install_all_admin_apis(root, context)` installs these and admin_api's endpoints together.
"""

from __future__ import annotations

import logging

from bkfast.errors import AdminError
from bkfast.threads import start_thread

from .admin_api import ENDPOINTS as ADMIN_ENDPOINTS
from .admin_api import Text, _ApiError, _body_object, _bool, install_admin_api

__all__ = ["ENDPOINTS", "install_all_admin_apis"]

log = logging.getLogger(__name__)

MAX_DELAY_SECONDS = 2**31 - 1


def _ops():
    from bkfast.replication import admin_ops

    return admin_ops


def _urm(s):
    """The under-replication manager on the bookie's metadata session (bkfast.meta.underreplication)."""
    return s.meta().under_replication()


def _election(s):
    """An observer of the auditor election on the bookie's metadata session."""
    return s.meta().auditor_election()


def _cookie_store(s):
    return s.meta().cookie_store()


def status(s, params, body):
    return _ops().autorecovery_status(_urm(s))


def status_put(s, params, body):
    if "enabled" not in params:
        raise _ApiError(400, f"Param 'enabled' not found in {params}")
    urm = _urm(s)
    enabled = _bool(params, "enabled")
    try:
        _ops().set_autorecovery(urm, enabled)
    except AdminError:
        pass                                        # already so: Java answers with the state either way
    return {"enabled": enabled}


def _background(name: str, fn, *args) -> None:
    def run():
        try:
            log.info("%s finished: %s", name, fn(*args))
        except Exception as err:
            log.error("%s failed: %s", name, err)

    start_thread(run, name)


def recover_bookie(s, params, body):
    from bkfast.replication.recover import recover_bookies_blocking

    values = _body_object(body)
    sources = values.get("bookie_src")
    if not isinstance(sources, list) or not sources or not all(isinstance(b, str) for b in sources):
        raise _ApiError(400, 'expected {"bookie_src": ["<bookie id>", ...], "delete_cookie": false}')
    delete_cookie = bool(values.get("delete_cookie", False))
    client = s.client()
    cookies = _cookie_store(s)

    def run():
        out = recover_bookies_blocking(client, sources[:1])
        if delete_cookie and out["ok"]:
            cookies.delete(sources[0])
        return {k: v for k, v in out.items() if k != "ledgers"}

    _background(f"recover-{sources[0]}", run)
    return Text("Success send recovery request command.")


def list_under_replicated(s, params, body):
    rows = _ops().list_under_replicated(_urm(s), params.get("missingreplica") or None,
                                        params.get("excludingmissingreplica") or None)
    if not rows:
        raise _ApiError(404, "No under replicated ledgers found")
    if "printmissingreplica" in params:
        return {str(r["ledgerId"]): r["missingReplicas"] for r in rows}
    return [r["ledgerId"] for r in rows]


def who_is_auditor(s, params, body):
    auditor = _ops().who_is_auditor(_election(s))
    if auditor is None:
        raise _ApiError(404, "No auditor elected")
    return Text(f"Auditor: {auditor}")


def trigger_audit(s, params, body):
    urm, election = _urm(s), _election(s)
    try:
        _ops().trigger_audit(urm, election)
    except AdminError as err:
        raise _ApiError(404, str(err)) from None
    return Text("Success trigger audit.")


def delay_get(s, params, body):
    return Text(f"lostBookieRecoveryDelay value: {_ops().get_lost_bookie_recovery_delay(_urm(s))}")


def delay_put(s, params, body):
    values = _body_object(body)
    seconds = values.get("delay_seconds")
    # Java reads the znode as an int: a larger value would make its auditors fail to parse it.
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise _ApiError(400, f'expected {{"delay_seconds": <seconds from 0 to {MAX_DELAY_SECONDS}>}}')
    _ops().set_lost_bookie_recovery_delay(_urm(s), seconds)
    return Text(f"Success set lostBookieRecoveryDelay to {seconds}")


def decommission(s, params, body):
    values = _body_object(body)
    bookie = values.get("bookie_src")
    if not isinstance(bookie, str) or ":" not in bookie:
        raise _ApiError(400, 'expected {"bookie_src": "<host:port>"}')
    urm = _urm(s)
    client = s.client()
    _background(f"decommission-{bookie}", _ops().decommission_bookie, client, urm, bookie)
    return Text(f"Success send decommission Bookie command {bookie}")


ENDPOINTS: dict[str, dict[str, object]] = {
    "autorecovery/status": {"GET": status, "PUT": status_put},
    "autorecovery/bookie": {"PUT": recover_bookie},
    "autorecovery/list_under_replicated_ledger": {"GET": list_under_replicated},
    "autorecovery/who_is_auditor": {"GET": who_is_auditor},
    "autorecovery/trigger_audit": {"PUT": trigger_audit, "POST": trigger_audit},
    "autorecovery/lost_bookie_recovery_delay": {"GET": delay_get, "PUT": delay_put},
    "autorecovery/decommission": {"PUT": decommission},
}


def install_all_admin_apis(root, context) -> None:
    """admin_api's endpoints and these under `root`/api/v1/ (see admin_api.install_admin_api)."""
    install_admin_api(root, context, {**ADMIN_ENDPOINTS, **ENDPOINTS})
