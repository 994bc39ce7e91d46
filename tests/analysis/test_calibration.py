"""``analysis/calibration.py``: the least-squares fit of ``streamjoin calibrate`` recovers known
service times exactly from synthetic times (no timing here), its residuals satisfy the normal
equations, degenerate designs are refused with one line, and the ``--capacity`` text it prints
parses back to the same nanoseconds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamjoin.pipelines.analysis.calibration import Fit, capacity_option, fit
from streamjoin.pipelines.base.errors import InputError
from streamjoin.pipelines.capacity.spec import parse_capacity

# 3 sizes x 3 window widths, as the job's design: results per tuple vary with the width
TUPLES = [n for n in (150_000, 300_000, 600_000) for _ in range(3)]
PER_TUPLE = [0.7, 2.7, 10.8] * 3
RESULTS = [round(n * k) for n, k in zip(TUPLES, PER_TUPLE)]


def times(a: float, b: float, c: float) -> list[float]:
    return [a * n + b * r + c for n, r in zip(TUPLES, RESULTS)]


def test_recovers_known_coefficients_exactly():
    f = fit(TUPLES, RESULTS, times(345e-9, 26e-9, 0.0035))
    assert f.tuple_s == pytest.approx(345e-9, rel=1e-9)
    assert f.result_s == pytest.approx(26e-9, rel=1e-9)
    assert f.intercept_s == pytest.approx(0.0035, rel=1e-9)
    assert f.r2 == pytest.approx(1.0, abs=1e-12)
    assert f.residual_max_abs_s < 1e-12
    assert capacity_option(f) == "tuple=345ns,result=26ns"


@settings(max_examples=60, deadline=None)
@given(a=st.floats(1e-9, 1e-5), b=st.floats(0.0, 1e-5), c=st.floats(-0.01, 0.1))
def test_recovers_any_coefficients(a, b, c):
    t = times(a, b, c)
    if min(t) <= 0:   # a time is positive; a negative intercept may not make one negative
        return
    f = fit(TUPLES, RESULTS, t)
    scale = max(t)   # the error is relative to the times, not to a tiny coefficient
    assert abs(f.tuple_s - a) * max(TUPLES) <= 1e-9 * scale
    assert abs(f.result_s - b) * max(RESULTS) <= 1e-9 * scale
    assert abs(f.intercept_s - c) <= 1e-9 * scale


def test_noisy_times_residuals_satisfy_the_normal_equations():
    """With noise the fit is the least-squares one: residuals sum to 0 and are orthogonal to
    both columns; R^2 is below 1 and the spreads are what the residuals say."""
    noise = np.array([0.004, -0.003, 0.002, -0.001, 0.0, 0.003, -0.004, 0.001, -0.002])
    t = np.array(times(300e-9, 40e-9, 0.01)) + noise
    f = fit(TUPLES, RESULTS, t.tolist())
    res = np.array(f.residual_s)
    fitted = f.tuple_s * np.array(TUPLES) + f.result_s * np.array(RESULTS) + f.intercept_s
    np.testing.assert_allclose(res, t - fitted, atol=1e-12)
    assert abs(res.sum()) < 1e-12
    assert abs(res @ np.array(TUPLES)) < 1e-12 * max(TUPLES)
    assert abs(res @ np.array(RESULTS)) < 1e-12 * max(RESULTS)
    assert 0.9 < f.r2 < 1.0
    assert f.residual_rms_s == pytest.approx(float(np.sqrt(np.mean(res ** 2))))
    assert f.residual_max_abs_s == pytest.approx(float(np.max(np.abs(res))))
    assert f.residual_max_relative == pytest.approx(float(np.max(np.abs(res) / t)))


def test_every_run_the_same_size_is_refused():
    with pytest.raises(InputError, match="same tuple count") as e:
        fit([1000] * 9, [100 * k for k in range(1, 10)], [0.01 * k for k in range(1, 10)])
    assert "\n" not in str(e.value)


def test_results_a_fixed_multiple_of_tuples_is_refused():
    with pytest.raises(InputError, match="do not vary tuples and results independently") as e:
        fit(TUPLES, [3 * n for n in TUPLES], times(1e-6, 1e-7, 0.0))
    assert "\n" not in str(e.value)


def test_too_few_runs_and_bad_numbers_are_refused():
    with pytest.raises(InputError, match="at least 4 inputs"):
        fit([1, 2, 3], [1, 5, 2], [0.1, 0.2, 0.3])
    with pytest.raises(InputError, match="a time > 0"):
        fit(TUPLES, RESULTS, [0.0] + times(1e-6, 0, 0)[1:])
    with pytest.raises(InputError, match="same length"):
        fit(TUPLES, RESULTS[:-1], times(1e-6, 0, 0))


def test_capacity_option_parses_back_and_refuses_a_negative_time():
    f = fit(TUPLES, RESULTS, times(1234.4e-9, 5.6e-9, 0.0))
    text = capacity_option(f)
    assert text == "tuple=1234ns,result=6ns"
    spec = parse_capacity(text)
    assert (spec.tuple_ns, spec.result_ns) == (1234, 6)
    negative = Fit(tuple_s=3e-7, result_s=-2e-9, intercept_s=0.0, r2=0.5, residual_s=(0.0,),
                   residual_rms_s=0.0, residual_max_abs_s=0.0, residual_max_relative=0.0)
    assert capacity_option(negative) is None
