"""The restart rule every supervisor follows (impala/supervision.py)."""

from __future__ import annotations

import math

import pytest

from impala.supervision import BACKOFF_S, LEFT_DOWN_STATUS, RestartPolicy


def test_restarts_wait_longer_each_time_then_the_process_is_left_down():
    policy = RestartPolicy(limit=3, window_s=60)
    delays = [policy.after_exit(1, now=t) for t in (0.0, 1.0, 2.0)]
    assert [d.delay_s for d in delays] == list(BACKOFF_S[:3])
    assert all(d.restart for d in delays) and policy.restarts == 3
    left = policy.after_exit(-9, now=3.0)
    assert not left.restart
    assert left.reason == "exited 4 times within 60 s (last status -9); restart limit 3"


def test_exits_older_than_the_window_are_forgotten():
    policy = RestartPolicy(limit=2, window_s=60)
    for t in (0.0, 10.0):
        assert policy.after_exit(1, now=t).restart
    # The first two fell out of the window: this is a first exit again, with its delay.
    decision = policy.after_exit(1, now=200.0)
    assert decision.restart and decision.delay_s == BACKOFF_S[0]


def test_a_learner_group_that_exits_0_has_finished_and_its_limit_spans_the_run():
    policy = RestartPolicy(limit=1, restart_on_success=False)
    assert policy.window_s == math.inf
    assert policy.after_exit(0, now=0.0).reason == "finished"
    assert policy.after_exit(137, now=1.0).restart
    assert not policy.after_exit(137, now=1e9).restart  # a day later still counts


def test_an_actor_restarts_whatever_its_status_and_limit_0_never_restarts():
    assert RestartPolicy(limit=5).after_exit(0, now=0.0).restart
    assert not RestartPolicy(limit=0).after_exit(1, now=0.0).restart


def test_a_process_left_down_below_is_left_down_here_too():
    decision = RestartPolicy(limit=5).after_exit(LEFT_DOWN_STATUS, now=0.0)
    assert not decision.restart and "left down by the supervisor where it ran" in decision.reason


@pytest.mark.parametrize("limit,window", [(-1, 60.0), (1, 0.0)])
def test_a_bad_limit_or_window_is_refused(limit, window):
    with pytest.raises(ValueError, match="must be"):
        RestartPolicy(limit=limit, window_s=window)
