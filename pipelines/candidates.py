"""Truth: every valid combination (SPEC §3), enumerated on whole columns.

A combination ``c = (t_0 in S_0, ..., t_{n-1} in S_{n-1})`` is valid iff its
members agree on every key column and, for every member ``k``,
``max_ts(c) - t_k.ts <= W_k``.  That window condition is exactly the set of
pairwise *band* conditions

    for every pair j, k:   -W_k  <=  t_k.ts - t_j.ts  <=  W_j

(the newest member is one of the pair, so pairwise bands imply the n-way
condition, and the n-way condition implies every pair's band).

Enumeration without quadratic blow-ups: the combination is grown one stream at
a time, joined to member 0 on the key columns and a *time bucket*.  With
``B = W_0 + W_k + 1`` and ``u = t_k + W_k``, the band
``0 <= u - t_0 <= W_0 + W_k`` means ``floor(u/B) - floor(t_0/B)`` is 0 or 1,
so one side is duplicated into two buckets and an equi-join on
``(keys, bucket)`` yields every candidate exactly once; the remaining pairwise
bands are then checked as filters::

    t_0 buckets:  |---B---|---B---|---B---|
    t_k + W_k:          ^ lands in t_0's bucket or the next one

The number of candidates is at most about twice the number of pairs within
``W_0 + W_k`` of each other: linear in the output, never a cross product.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def member_frame(k: int, ts, keys: pl.DataFrame | None) -> pl.DataFrame:
    """Stream ``k``'s join columns: ``r{k}`` (row), ``t{k}`` (ts) and keys."""
    frame = pl.DataFrame({f"r{k}": pl.int_range(0, len(ts), dtype=pl.Int64, eager=True), f"t{k}": ts})
    if keys is not None and keys.width:
        frame = frame.hstack(keys)
    return frame


def enumerate_truth(frames: Sequence[pl.DataFrame], windows: Sequence[int], key_names: Sequence[str]) -> pl.DataFrame:
    """All valid combinations, as columns ``r0..r{n-1}`` and ``t0..t{n-1}``.

    Args:
        frames: per stream, :func:`member_frame` output; key columns share the
            names ``key_names`` and a common dtype across streams.
        windows: ``W_k`` in microseconds, one per stream.
        key_names: the equality key columns (may be empty: time only).
    Guarantees: each valid combination appears exactly once.
    """
    keys = list(key_names)
    W = [int(w) for w in windows]
    combos = frames[0]
    for k in range(1, len(frames)):
        B = W[0] + W[k] + 1
        right = frames[k].with_columns(((pl.col(f"t{k}") + W[k]) // B).alias("_b"))
        # Duplicate the smaller side into the two buckets it can meet.
        if combos.height <= right.height:
            left_b = (pl.col("t0") // B)
            left = pl.concat([combos.with_columns(left_b.alias("_b")),
                              combos.with_columns((left_b + 1).alias("_b"))])
        else:
            left = combos.with_columns((pl.col("t0") // B).alias("_b"))
            rb = pl.col("_b")
            right = pl.concat([right, right.with_columns(rb - 1)])
        joined = left.join(right, on=[*keys, "_b"], how="inner").drop("_b")
        band = [
            ((pl.col(f"t{k}") - pl.col(f"t{j}")) <= W[j]) & ((pl.col(f"t{j}") - pl.col(f"t{k}")) <= W[k])
            for j in range(k)
        ]
        combos = joined.filter(pl.all_horizontal(band))
    return combos.select([f"r{k}" for k in range(len(frames))] + [f"t{k}" for k in range(len(frames))])
