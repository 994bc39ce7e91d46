"""The Spark engine's record hand-off (pipelines/engines/spark/handoff.py), without Spark."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from streamjoin.pipelines.engines.spark.handoff import Handoff, same_host
from streamjoin.pipelines.base.errors import InputError


def _record():
    rng = np.random.default_rng(3)
    return {"r0": rng.integers(0, 2**31 - 1, 1000).astype(np.int32), "emitted": np.packbits(rng.random(1000) < 0.5),
            "m": 1000, "nested": ({"ts": np.arange(5)}, None)}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    assert np.array_equal(a["nested"][0]["ts"], b["nested"][0]["ts"]) and b["nested"][1] is None


@pytest.mark.parametrize("master,mode", [("local[2]", "files"), ("local-cluster[2,1,1024]", "files"), ("local", "files"),
                                         ("spark://host:7077", "inline"), ("yarn", "inline"), ("k8s://x", "inline")])
def test_auto_uses_files_only_when_executors_share_the_host(master, mode):
    assert same_host(master) == (mode == "files")
    h = Handoff.open("auto", master)
    try:
        assert h.mode == mode
    finally:
        h.close()


def test_files_round_trip_survives_pickling_and_close_removes_everything():
    h = Handoff.open("files", "local[2]")
    rec = _record()
    token = h.put(rec)
    assert os.path.isfile(token.path) and os.path.dirname(token.path) == h.directory
    h2 = pickle.loads(pickle.dumps(h))                    # what a task receives in its closure
    _same(rec, h2.get(token))                             # a task reads its input ...
    _same(rec, h2.get(token))                             # ... and may read it again on a retry
    out = h2.put({"x": np.arange(3)})
    assert np.array_equal(h.get(out, consume=True)["x"], np.arange(3))
    assert not os.path.exists(out.path)                    # the driver's read consumed the result
    h2.put({"orphan": 1})                                  # e.g. a failed attempt's output
    assert not any(n.endswith(".part") for n in os.listdir(h.directory))
    h.close()
    assert not os.path.exists(h.directory)


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://x"])
def test_files_are_refused_when_executors_are_on_other_hosts(master):
    with pytest.raises(InputError, match="files needs every executor on the driver's host"):
        Handoff.open("files", master)


def test_a_record_that_cannot_be_written_travels_inline():
    h = Handoff.open("files", "local[2]")
    rec = _record()
    h.close()                                              # the directory is gone: every write fails
    token = h.put(rec)
    assert token is rec and h.get(token, consume=True) is rec


def test_inline_is_the_object_itself():
    h = Handoff.open("inline", "local[2]")
    rec = _record()
    assert h.mode == "inline" and h.directory is None
    assert h.put(rec) is rec and h.get(rec, consume=True) is rec
    h.close()


def test_bad_mode_is_an_input_error():
    with pytest.raises(InputError, match="spark.streamjoin.handoff"):
        Handoff.open("shm", "local[2]")


def test_cli_rejects_a_bad_handoff_before_starting_spark(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    exe = str(Path(sys.executable).with_name("streamjoin"))
    sample = Path(__file__).resolve().parents[2] / "samples" / "sensors" / "sensors.toml"
    proc = subprocess.run([exe, "run", str(sample), "--engine", "spark", "--spark-conf", "spark.streamjoin.handoff=shm",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --spark-conf spark.streamjoin.handoff=shm: expected auto, files or inline"]
    assert not (tmp_path / "out").exists()


def test_files_mode_maps_the_columns_instead_of_copying_them():
    """A task's columns are rebuilt on the mapped file (no fresh memory for them):
    aligned, writable, and a write stays private to the reader."""
    h = Handoff.open("files", "local[2]")
    try:
        cols = {"ts": np.arange(100_000, dtype=np.int64) * 7, "row": np.arange(100_000, dtype=np.int32),
                "flag": np.ones(3, dtype=bool), "empty": np.empty(0, np.int64)}
        token = h.put(cols)
        got = h.get(token)
        for name, want in cols.items():
            arr = got[name]
            assert arr.dtype == want.dtype and np.array_equal(arr, want)
            if arr.nbytes:
                assert not arr.flags.owndata and arr.flags.writeable
                assert arr.ctypes.data % 64 == 0   # each buffer starts 64-byte aligned
        got["ts"][0] = -1                          # copy-on-write: the file is unchanged
        assert h.get(token)["ts"][0] == 0
        again = h.get(token, consume=True)          # unlinked, still readable through the mapping
        assert not os.path.exists(token.path) and int(again["ts"][-1]) == 7 * 99_999
    finally:
        h.close()


def test_files_mode_rejects_a_file_that_is_not_a_record(tmp_path):
    h = Handoff.open("files", "local[2]")
    try:
        bad = tmp_path / "x"
        bad.write_bytes(pickle.dumps({"a": 1}))
        from streamjoin.pipelines.engines.spark.handoff import _File

        with pytest.raises(ValueError, match="not a hand-off record"):
            h.get(_File(str(bad)))
    finally:
        h.close()
