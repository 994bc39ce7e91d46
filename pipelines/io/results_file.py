"""results.parquet: result frames written as Parquet row groups, one per frame.

:func:`write_row_groups` takes the frames from an iterator and builds the
next one on a second thread while the current one is encoded and compressed
(numpy's and polars' gathers and Arrow's Parquet writer release the GIL), so
a run's results are never all in memory as one frame and building overlaps
writing.

The file (docs/performance.md, "Results writer (issue 21)"): snappy
(:data:`~streamjoin.pipelines.io.output.RESULTS_COMPRESSION`), no dictionary
encoding (result columns are row numbers and times with few repeats: it
costs write time and makes the file larger), min/max statistics kept (the
file is in emission order, so readers that prune row groups -- Spark,
DuckDB, polars -- skip by ``emit_us``), no embedded Arrow schema (the
Parquet types alone, as polars writes them, so every reader sees the types it
would see in a polars-written file).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from .output import RESULTS_COMPRESSION

#: rows per row group at most (Arrow's default; ~100 MB of two streams' columns,
#: near Spark's 128 MB block): a larger frame is split
ROW_GROUP_ROWS = 1 << 20


def write_row_groups(path: Path, frames: Iterable[pl.DataFrame]) -> int:
    """Write ``frames`` (at least one, all of one schema) to ``path``, one row
    group each (split at :data:`ROW_GROUP_ROWS`), in order; returns the number
    of rows written."""
    it = iter(frames)
    rows = 0
    writer: pq.ParquetWriter | None = None
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(next, it, None)
        try:
            while (frame := ahead.result()) is not None:
                ahead = pool.submit(next, it, None)
                table = frame.to_arrow()
                if writer is None:
                    writer = pq.ParquetWriter(path, table.schema, compression=RESULTS_COMPRESSION,
                                              use_dictionary=False, write_statistics=True)
                elif table.schema != writer.schema:
                    table = table.cast(writer.schema)
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                rows += table.num_rows
        finally:
            if writer is not None:
                writer.close()
    if writer is None:
        raise ValueError("write_row_groups: no frame to write (not even an empty one with the schema)")
    return rows
