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

__all__ = ["register", "BkfastDataSource", "BkfastSparkError"]


def register(spark) -> None:
    """Register format "bkfast" with this SparkSession."""
    from .source import BkfastDataSource

    spark.dataSource.register(BkfastDataSource)


def __getattr__(name):
    if name == "BkfastDataSource":
        from .source import BkfastDataSource

        return BkfastDataSource
    if name == "BkfastSparkError":
        from .options import BkfastSparkError

        return BkfastSparkError
    raise AttributeError(name)
