"""The bkfast test suite, laid out by the package each test exercises."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO / "tests" / "vectors"
