"""results.parquet has one writer (``io/results_file.ResultsFile``) for the in-memory
run (``write_row_groups``) and the chunked run (``jobs/chunked``): the file is, byte for
byte, what Arrow's own Parquet writer makes of the same frames with the documented
options (snappy, no dictionary, statistics, row groups of at most ROW_GROUP_ROWS rows,
later frames cast to the first one's schema), and a chunked run's file is that of the
frames its engine handed to the writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from streamjoin.pipelines.io import results_file
from streamjoin.pipelines.io.results_file import ResultsFile, write_row_groups


def _frames(seed: int = 1) -> list[pl.DataFrame]:
    rng = np.random.default_rng(seed)
    out = []
    for n in (5, 0, 9, 3):
        out.append(pl.DataFrame({"a_row": rng.integers(0, 100, n), "emit_us": np.sort(rng.integers(0, 10**6, n)),
                                 "f": rng.normal(size=n), "s": [f"x{i % 3}" for i in range(n)]}))
    # a later frame with narrower types: cast to the first frame's schema
    out[2] = out[2].with_columns(pl.col("a_row").cast(pl.Int32))
    return out


def _arrow_reference(path: Path, frames: list[pl.DataFrame], rows_per_group: int) -> None:
    tables = [f.to_arrow() for f in frames]
    with pq.ParquetWriter(path, tables[0].schema, compression="snappy", use_dictionary=False,
                          write_statistics=True) as w:
        for t in tables:
            w.write_table(t.cast(tables[0].schema), row_group_size=rows_per_group)


@pytest.mark.parametrize("rows_per_group", [4, 1 << 20])
def test_write_row_groups_is_arrows_file_byte_for_byte(tmp_path, monkeypatch, rows_per_group):
    monkeypatch.setattr(results_file, "ROW_GROUP_ROWS", rows_per_group)
    frames = _frames()
    assert write_row_groups(tmp_path / "ours.parquet", iter(frames)) == sum(f.height for f in frames)
    _arrow_reference(tmp_path / "ref.parquet", frames, rows_per_group)
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    md = pq.ParquetFile(tmp_path / "ours.parquet").metadata
    assert md.num_row_groups == (7 if rows_per_group == 4 else 4)   # 5 -> 4+1, 0 -> one empty, 9 -> 4+4+1, 3


def test_results_file_prepares_on_its_thread_and_writes_the_empty_frame_only_without_frames(tmp_path):
    frames = _frames(2)
    by_time = lambda f: f.sort("emit_us", descending=True)   # noqa: E731
    out = ResultsFile(tmp_path / "ours.parquet", prepare=by_time)
    for f in frames:
        out.write(f)
    assert out.close(frames[1].clear()) == sum(f.height for f in frames)
    _arrow_reference(tmp_path / "ref.parquet", [by_time(f) for f in frames], results_file.ROW_GROUP_ROWS)
    assert (tmp_path / "ours.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()

    empty = ResultsFile(tmp_path / "empty.parquet", prepare=by_time)
    assert empty.close(frames[0].clear()) == 0
    _arrow_reference(tmp_path / "ref_empty.parquet", [frames[0].clear()], results_file.ROW_GROUP_ROWS)
    assert (tmp_path / "empty.parquet").read_bytes() == (tmp_path / "ref_empty.parquet").read_bytes()
    with pytest.raises(ValueError, match="no frame to write"):
        write_row_groups(tmp_path / "none.parquet", [])


@pytest.mark.parametrize("policy", [["--policy", "kslack", "--k", "2ms"],
                                    ["--policy", "spark-ss", "--watermark", "2ms", "--trigger", "5ms", "--join",
                                     "full"]])
def test_chunked_run_writes_results_through_the_one_writer(tmp_path, monkeypatch, policy):
    from streamjoin.pipelines.config.settings import Flags, resolve
    from streamjoin.pipelines.jobs import run as job

    rng = np.random.default_rng(4)
    for name in ("a", "b"):
        ts = (np.sort(rng.integers(1, 2_000, 3_000)) * 1_000).astype(np.int64)
        pl.DataFrame({"ts": ts, "arrival": ts + rng.integers(0, 6, 3_000) * 1_000, "k": rng.integers(0, 4, 3_000)}
                     ).write_parquet(tmp_path / f"{name}.parquet")
    handed: list[pl.DataFrame] = []
    write = ResultsFile.write

    def recorded(self, frame):
        handed.append(self.prepare(frame))
        write(self, frame)

    monkeypatch.setattr(ResultsFile, "write", recorded)
    flags = Flags(streams=[f"a={tmp_path / 'a.parquet'}", f"b={tmp_path / 'b.parquet'}"], unit=["us"], keys=["k"],
                  window=["3ms"], engine="local", chunk_rows=700, out=str(tmp_path / "o"),
                  policy=policy[1], k=[policy[3]] if policy[1] == "kslack" else [],
                  watermark=[policy[3]] if policy[1] == "spark-ss" else [],
                  triggers=[policy[5]] if policy[1] == "spark-ss" else [],
                  join=policy[7] if policy[1] == "spark-ss" else None)
    report = job.run_job(resolve(None, flags))
    assert report["bounded"]["chunks"] > 3 and len(handed) > 1
    _arrow_reference(tmp_path / "ref.parquet", handed, results_file.ROW_GROUP_ROWS)
    assert (tmp_path / "o" / "results.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "o" / "results.parquet").height == report["emitted_results"] + sum(
        s.get("outer_rows", 0) for s in report["streams"])
