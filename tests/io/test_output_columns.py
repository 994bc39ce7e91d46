"""io/columns.check_output_columns against an obviously-correct reference.

The reference writes down every column name streamjoin would write --
per stream ``s``: ``s_row``, ``s_ts_us``, ``s_arrival_us`` (nightly:
``s_date`` first) and ``s_<column>`` for each payload column; then
``emit_us``, ``latency_us`` -- and looks for two that are equal ignoring case,
plus an input column named ``reason`` (ignoring case: the quarantine file adds
``reason``).  The check must refuse exactly those inputs, in one line naming a
colliding name.  Names are drawn from a few short pieces joined by ``_`` so
that collisions (``o`` + ``eu_x`` against ``o_eu`` + ``x``; ``emit`` + ``us``;
``a`` + ``B_x`` against ``a_b`` + ``x``) are frequent.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config.settings import StreamConfig
from streamjoin.pipelines.io.columns import NIGHTLY_RESULT_FIELDS, RESULT_FIELDS, check_output_columns

PIECES = ["a", "A", "b", "B", "x", "X", "row", "Row", "ts", "us", "arrival", "emit", "latency", "date", "reason",
          "Reason"]


def reference_collisions(streams: list[tuple[StreamConfig, list[str]]], fields: tuple[str, ...]) -> set[str]:
    """Lower-cased names written twice, and the input columns named ``reason`` (any case)."""
    names: list[str] = []
    bad: set[str] = set()
    for cfg, columns in streams:
        names += [f"{cfg.name}_{f}" for f in fields]
        for c in columns:
            if c.lower() == "reason":
                bad.add(c.lower())
            if c not in (cfg.ts, cfg.arrival):
                names.append(f"{cfg.name}_{c}")
    names += ["emit_us", "latency_us"]
    counts = Counter(n.lower() for n in names)
    return bad | {n for n, k in counts.items() if k > 1}


words = st.lists(st.sampled_from(PIECES), min_size=1, max_size=2).map("_".join)
# a stream name: a letter first (PIECES all start with one)
stream_names = words.filter(lambda w: len(w) <= 64)


@st.composite
def inputs(draw):
    names = draw(st.lists(stream_names, min_size=2, max_size=3, unique_by=str.lower))
    streams = []
    for i, name in enumerate(names):
        payload = draw(st.lists(words, max_size=3, unique=True))
        arrival = draw(st.sampled_from([None, "arrival"]))
        columns = ["ts", *([arrival] if arrival else []), *[c for c in payload if c not in ("ts", arrival)]]
        streams.append((StreamConfig(name=name, path=f"s{i}.parquet", arrival=arrival), columns))
    return streams


@settings(max_examples=1000, deadline=None)
@given(streams=inputs(), nightly=st.booleans())
def test_refused_exactly_when_two_written_names_meet(streams, nightly) -> None:
    fields = NIGHTLY_RESULT_FIELDS if nightly else RESULT_FIELDS
    expected = reference_collisions(streams, fields)
    try:
        check_output_columns(streams, fields=fields)
    except InputError as err:
        message = str(err)
        assert expected, f"refused without a collision: {message}"
        assert "\n" not in message
        quoted = {w.lower() for w in re.findall(r"'([^']*)'", message)}
        assert quoted & expected, (message, expected)
        return
    assert not expected, f"accepted, but {sorted(expected)} collide"


@pytest.mark.parametrize("streams,needles", [
    # the brief's case: o + eu_x and o_eu + x are both o_eu_x
    ([("o", ["ts", "eu_x"]), ("o_eu", ["ts", "x"])], ["'o_eu_x'", "stream 'o'", "'eu_x'", "stream 'o_eu'", "'x'"]),
    # a prefixed name equal to a fact column
    ([("emit", ["ts", "us"]), ("b", ["ts"])], ["'emit_us'", "emission time"]),
    ([("latency", ["ts", "us"]), ("b", ["ts"])], ["'latency_us'", "latency"]),
    # a stream's payload against another stream's generated field
    ([("a", ["ts", "b_row"]), ("a_b", ["ts"])], ["'a_b_row'", "row number"]),
    # equal ignoring case only: Spark reads them as one column
    ([("a", ["ts", "B_x"]), ("a_b", ["ts", "x"])], ["'a_B_x'", "'a_b_x'", "differ only in case"]),
    ([("a", ["ts", "X", "x"]), ("b", ["ts"])], ["'a_X'", "'a_x'", "differ only in case"]),
    ([("a", ["ts", "Row"]), ("b", ["ts"])], ["'a_Row'", "'a_row'", "differ only in case"]),
    ([("a", ["ts", "Reason"]), ("b", ["ts"])], ["'Reason'", "quarantine/a.parquet"]),
])
def test_the_message_names_both_sides(streams, needles) -> None:
    configs = [(StreamConfig(name=n, path=f"{n}.parquet"), cols) for n, cols in streams]
    with pytest.raises(InputError) as err:
        check_output_columns(configs)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_names_that_only_look_alike_pass() -> None:
    """``a`` + ``b_x`` beside ``b`` + ``x`` (``a_b_x``, ``b_x``), and payload named
    ``ts`` / ``arrival`` when the stream's time columns are named otherwise."""
    check_output_columns([(StreamConfig(name="a", path="a.parquet"), ["ts", "b_x"]),
                          (StreamConfig(name="b", path="b.parquet", ts="t", arrival="at"), ["t", "at", "x", "ts",
                                                                                             "arrival"])])
