"""Durations from a flag or the TOML: one parser (``options.check_duration``) serves
``run``'s settings, ``--min-cleanup-interval`` and ``compare``'s variants, each with
its own one-line refusal of a value that is not a string with a unit."""

from __future__ import annotations

import pytest

from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.config import options, variants


@pytest.mark.parametrize("value, us", [("250ms", 250_000), ("2s", 2_000_000), (0, 0), ("0", 0)])
def test_check_duration_reads_strings_with_a_unit_and_zero(value, us):
    assert options.check_duration(value, "period") == us
    assert options.min_cleanup_setting(value, None, "flink-sql") == us


@pytest.mark.parametrize("value", [5, 2.5, True, [1], {"a": 1}])
def test_min_cleanup_interval_refuses_what_check_duration_refuses_in_one_line(value):
    with pytest.raises(InputError) as got:
        options.min_cleanup_setting(None, value, "flink-sql")
    assert str(got.value) == f'bad min_cleanup_interval {value!r}: expected a string with a unit, e.g. "250ms", "2s"'
    with pytest.raises(InputError) as same:
        options.check_duration(value, "min_cleanup_interval")
    assert str(same.value) == str(got.value)


def test_min_cleanup_interval_is_refused_for_another_policy_before_its_value_is_read():
    with pytest.raises(InputError, match="a setting of --policy flink-sql, not of flink$"):
        options.min_cleanup_setting(None, 5, "flink")
    assert options.min_cleanup_setting(None, None, "flink") == 0


def test_compare_variants_keep_their_own_example():
    from types import SimpleNamespace

    from streamjoin.pipelines.policies import PolicySpec

    streams = [SimpleNamespace(name=n, watermark_us=1_000_000, retention_us=None, k_us=None) for n in "ab"]
    variant = variants.parse_table({"policy": "spark-ss", "trigger": 5}, "job.toml: compare #1")
    with pytest.raises(InputError) as got:
        variants.variant_policy(variant, PolicySpec("none"), streams, None, 1_000_000)
    assert str(got.value) == 'bad trigger 5: expected a string with a unit, e.g. "10s"'
    ok = variants.parse_table({"policy": "spark-ss", "trigger": "2s"}, "job.toml: compare #1")
    assert variants.variant_policy(ok, PolicySpec("none"), streams, None, 1_000_000).trigger_us == 2_000_000
