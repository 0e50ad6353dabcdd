"""PySpark 4 data source "bkfast" over named log streams (the `spark` extra: pyspark >= 4, pyarrow >= 18).

    import bkfast.spark
    bkfast.spark.register(spark)          # once per SparkSession; there is no auto-registration
    spark.read.format("bkfast").option("metadataServiceUri", "zk+hierarchical://zk:2181/ledgers") \\
        .option("stream", "events").load()

Modules: `options` (option parsing, analysis-time errors), `source` (the DataSource and its batch and
streaming readers/writers), `plan` (driver-side partition planning and the one-CAS commit), `tasks`
(executor side), `arrow_io` (entries <-> Arrow without per-row Python).
"""

from __future__ import annotations

import importlib.util
import sys

from bkfast.errors import WorkerPythonError

__all__ = ["register", "BkfastDataSource", "BkfastSparkError", "WorkerPythonError"]

# What the executor side imports (bkfast's dependencies and the spark extra's): a Spark worker started on
# another Python than the one bkfast is installed in fails on the first of them, deep in bkfast.
_WORKER_MODULES = ("twisted", "kazoo", "crochet", "google.protobuf", "crc32c", "pyarrow")
_FIX = ("set PYSPARK_PYTHON to the Python bkfast is installed in (e.g. the virtualenv's bin/python) before the "
        "SparkSession starts")


def _missing_modules() -> list[str]:
    missing = []
    for name in _WORKER_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:                 # a parent package (google) that is not there
            found = False
        if not found:
            missing.append(name)
    return missing


def _check_this_python() -> None:
    missing = _missing_modules()
    if missing:
        raise WorkerPythonError(f"bkfast.spark: {sys.executable} (the Python running this Spark worker) cannot "
                                f"import {', '.join(missing)}: it is not the Python bkfast is installed in; "
                                f"{_FIX}")


_check_this_python()


def register(spark) -> None:
    """Register format "bkfast" with this SparkSession. With a local master, first check that the Python
    the Spark workers will run (PYSPARK_PYTHON, else python3 from PATH) can import bkfast.spark: a
    mismatch otherwise fails the first job inside Spark, far from its cause."""
    from .source import BkfastDataSource

    sc = spark.sparkContext
    if str(sc.master).startswith("local"):
        check_worker_python(sc.pythonExec)
    spark.dataSource.register(BkfastDataSource)


def check_worker_python(python: str, timeout_s: float = 60.0) -> None:
    """BkfastSparkError in one line unless `python` can import bkfast.spark (run once, in a subprocess)."""
    import os
    import shutil
    import subprocess

    from .options import BkfastSparkError

    if os.path.realpath(shutil.which(python) or python) == os.path.realpath(sys.executable):
        return
    try:
        result = subprocess.run([python, "-c", "import bkfast.spark"], capture_output=True, text=True,
                                timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BkfastSparkError(f"bkfast.spark: the Spark workers' Python {python!r} cannot be run ({err}); "
                               f"{_FIX}, e.g. PYSPARK_PYTHON={sys.executable}") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit status {result.returncode}"
        raise BkfastSparkError(f"bkfast.spark: the Spark workers would run {python!r}, which cannot import "
                               f"bkfast.spark ({why}); {_FIX}, e.g. PYSPARK_PYTHON={sys.executable}")


def __getattr__(name):
    if name == "BkfastDataSource":
        from .source import BkfastDataSource

        return BkfastDataSource
    if name == "BkfastSparkError":
        from .options import BkfastSparkError

        return BkfastSparkError
    raise AttributeError(name)
