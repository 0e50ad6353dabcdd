"""Entry point of the `bkfast` command: a click group that later modules add subcommands to."""

import click

from bkfast import __version__
from bkfast.cli.autorecovery import autorecovery
from bkfast.cli.bench import bench
from bkfast.cli.bookie import bookie
from bkfast.cli.sandbox import sandbox
from bkfast.cli.shell import shell
from bkfast.cli.stream import stream


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bkfast")
def main() -> None:
    """bkfast: Apache BookKeeper-compatible bookies, client and tools."""


main.add_command(bench)
main.add_command(shell)
main.add_command(bookie)
main.add_command(sandbox)
main.add_command(stream)
main.add_command(autorecovery)

if __name__ == "__main__":
    main()
