"""`python tests/admin_api_launcher.py bookie ...`: the `bkfast` command with the HTTP admin endpoints of
bkfast/http/admin_api.py installed on the bookie's admin site (until the server installs them itself).
Everything else is the ordinary `bkfast bookie` code path."""

from bkfast.cli.main import main
from bkfast.http import admin_api, server

_build_site = server.build_site


def build_site(ctx):
    site = _build_site(ctx)
    admin_api.install_admin_api(site.resource, ctx)
    return site


server.build_site = build_site

if __name__ == "__main__":
    main()
