"""The `bkfast` console script."""

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from bkfast import __version__
from bkfast.cli.main import main


def test_version_and_help():
    runner = CliRunner()
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0 and "BookKeeper" in result.output


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("bkfast")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"bkfast, version {__version__}"
