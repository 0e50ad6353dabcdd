"""`bkfast shell` commands of bookie placement: the rack table Pulsar keeps in ZooKeeper (setbookierack,
getbookierack, deletebookierack, listbookieracks; the table beside the ledgers root, `/bookies`) and
placementpolicycheck (every closed ledger judged by the placement policy of --conf). Thin: bkfast.admin.racks
does the work."""

from __future__ import annotations

import click

from bkfast.admin import racks as admin_racks

from .shell_common import BOOKIE_ID, client_of, common_options, emit, json_option, on_zk, zk_of

__all__ = ["COMMANDS"]


def _line(row: dict) -> str:
    host = f"\thostname {row['hostname']}" if row.get("hostname") else ""
    return f"{row['bookie']}\tgroup {row['group']}\track {row['rack']}{host}"


@click.command()
@common_options
@click.argument("bookie", type=BOOKIE_ID)
@click.option("--rack", "-r", required=True, help="The bookie's rack: /rack, /region/rack or /zone/upgradedomain")
@click.option("--group", "-g", default=None, help="The table's group (Pulsar's bookie affinity group; default "
              "'default')")
@click.option("--hostname", default=None, help="The bookie's host name, kept with its rack")
@json_option
def setbookierack(target, bookie, rack, group, hostname, as_json):
    """Set the rack of BOOKIE (host:port) in the bookie rack table (Pulsar's /bookies)."""
    out = on_zk(target, admin_racks.set_bookie_rack, bookie, rack, group, hostname)
    emit(out, as_json, lambda row: "set " + _line(row))


@click.command()
@common_options
@click.argument("bookie", type=BOOKIE_ID)
@json_option
def getbookierack(target, bookie, as_json):
    """Print the rack of BOOKIE from the bookie rack table."""
    emit(on_zk(target, admin_racks.get_bookie_rack, bookie), as_json, _line)


@click.command()
@common_options
@click.argument("bookie", type=BOOKIE_ID)
@json_option
def deletebookierack(target, bookie, as_json):
    """Remove BOOKIE from the bookie rack table (it goes back to the default rack)."""
    emit(on_zk(target, admin_racks.delete_bookie_rack, bookie), as_json, lambda o: f"deleted the rack of {o['bookie']}")


@click.command()
@common_options
@json_option
def listbookieracks(target, as_json):
    """List the bookie rack table: every group, bookie and rack."""
    out = on_zk(target, admin_racks.list_bookie_racks)

    def text(table):
        if not table:
            yield "the bookie rack table is empty"
        for group, bookies in table.items():
            for bookie, info in bookies.items():
                yield _line({"bookie": bookie, "group": group, **info})

    emit(out, as_json, text)


@click.command()
@common_options
@click.option("--list", "-l", "show", is_flag=True, help="Also print the ids of the ledgers found")
@json_option
def placementpolicycheck(target, show, as_json):
    """Judge every closed ledger by the placement policy of --conf (ensemblePlacementPolicy and its keys), as
    the auditor's periodic check does; print how many do not adhere, or adhere only softly."""
    from bkfast.conf import client_settings_of

    with client_of(target, **client_settings_of(target.conf)) as bk, zk_of(target) as (zk, root, layout):
        out = admin_racks.placement_policy_check(bk, zk, root, layout)

    def text(o):
        yield (f"{o['placementPolicy']}: {o['ledgersChecked']} closed ledgers checked, "
               f"{o['numLedgersNotAdheringToPlacementPolicy']} not adhering, "
               f"{o['numLedgersSoftlyAdheringToPlacementPolicy']} softly adhering")
        if show:
            yield "not adhering: " + (" ".join(map(str, o["notAdhering"])) or "-")
            yield "softly adhering: " + (" ".join(map(str, o["softlyAdhering"])) or "-")

    emit(out, as_json, text)


COMMANDS = [setbookierack, getbookierack, deletebookierack, listbookieracks, placementpolicycheck]
