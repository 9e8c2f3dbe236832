"""The delta reward: step rewards telescope to the progress of the last score over the baseline."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from air.env.rewards import RewardSettings, RewardTracker

scores = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)


def test_first_evaluation_is_compared_with_the_baseline():
    tracker = RewardTracker(baseline=0.8, higher_is_better=True)
    assert tracker.record(0.88) == pytest.approx(0.1)  # 10 % better than the baseline
    assert tracker.record(0.84) == pytest.approx(-0.05)  # worse than the previous evaluation
    assert tracker.rollout_reward() == pytest.approx(0.05)
    metrics = tracker.metrics()
    assert metrics["best_score"] == 0.88 and metrics["final_score"] == 0.84
    assert metrics["improvement"] == pytest.approx(0.05) and metrics["scored"] == 1.0


def test_lower_is_better_flips_the_sign():
    tracker = RewardTracker(baseline=100.0, higher_is_better=False)
    assert tracker.record(90.0) == pytest.approx(0.1)
    assert tracker.best_score == 90.0
    tracker.record(120.0)
    assert tracker.best_score == 90.0 and tracker.rollout_reward() == pytest.approx(-0.2)


def test_absolute_scale_and_clip():
    tracker = RewardTracker(baseline=2.0, settings=RewardSettings(scale="absolute", clip=0.5))
    assert tracker.record(2.3) == pytest.approx(0.3)
    assert tracker.record(10.0) == pytest.approx(0.2)  # clipped at +0.5 in total


def test_failed_evaluations_earn_nothing_and_keep_the_reference():
    tracker = RewardTracker(baseline=1.0)
    assert tracker.record(None) == 0.0
    assert tracker.record(float("nan")) == 0.0
    assert tracker.record(1.5) == pytest.approx(0.5)
    assert tracker.failed_evaluations == 2 and tracker.evaluations == 3


def test_a_suspicious_evaluation_earns_nothing_is_counted_and_keeps_the_reference():
    tracker = RewardTracker(baseline=1.0)
    assert tracker.record(99.0, suspicious=True) == 0.0
    assert tracker.record(1.2) == pytest.approx(0.2)  # compared with the baseline, not with the forgery
    metrics = tracker.metrics()
    assert metrics["suspicious_evaluations"] == 1.0 and metrics["failed_evaluations"] == 1.0
    assert metrics["best_score"] == pytest.approx(1.2)


def test_penalties():
    settings = RewardSettings(format_error_penalty=0.1, no_score_penalty=0.3)
    tracker = RewardTracker(baseline=1.0, settings=settings)
    assert tracker.rollout_reward(format_errors=2) == pytest.approx(-1.5)  # no score (-clip - 0.3), two errors
    tracker.record(1.0)
    assert tracker.rollout_reward(format_errors=2) == pytest.approx(-0.2)
    assert tracker.metrics()["final_score"] == 1.0


@given(baseline=scores, score=scores, higher=st.booleans())
def test_no_score_earns_less_than_the_worst_honest_score(baseline, score, higher):
    honest = RewardTracker(baseline=baseline, higher_is_better=higher)
    honest.record(score)
    broken = RewardTracker(baseline=baseline, higher_is_better=higher)
    broken.record(None)
    broken.record(99.0, suspicious=True)
    assert broken.rollout_reward() < honest.rollout_reward()


def test_zero_or_missing_baseline():
    zero = RewardTracker(baseline=0.0)
    assert zero.record(0.25) == pytest.approx(0.25)  # relative to 1 when the baseline is 0
    unknown = RewardTracker(baseline=None)
    assert unknown.record(5.0) == 0.0 and unknown.metrics()["final_score"] == 5.0


@given(baseline=scores, evaluations=st.lists(st.one_of(scores, st.none()), max_size=20), higher=st.booleans())
def test_step_rewards_telescope_to_the_last_scores_progress(baseline, evaluations, higher):
    tracker = RewardTracker(baseline=baseline, higher_is_better=higher)
    total = sum(tracker.record(s) for s in evaluations)
    valid = [s for s in evaluations if s is not None]
    expected = tracker.progress(valid[-1]) if valid else 0.0
    assert math.isclose(total, expected, abs_tol=1e-9)
    assert all(math.isfinite(v) for v in tracker.metrics().values())
    assert abs(expected) <= tracker.settings.clip
