"""Checkpoint GC policy and incremental JSON-lines ingestion."""

import pytest

from dethpc.common.jsonlines import metric_value, read_new_lines
from dethpc.control.checkpoint_gc import CkptInfo, to_delete


def C(uuid, trial, steps, metric, live=False):
    return CkptInfo(uuid, trial, steps, float(steps), metric, live)


CKPTS = [C("a1", 1, 10, 0.9), C("a2", 1, 20, 0.5), C("a3", 1, 30, 0.7),
         C("b1", 2, 10, 0.4), C("b2", 2, 20, 0.6)]


@pytest.mark.parametrize("exp_best,trial_best,trial_latest,expected", [
    (0, 1, 1, {"a1"}),                                   # keep a2 (best), a3 (latest), b1, b2
    (0, 0, 1, {"a1", "a2", "b1"}),                       # latest only
    (1, 0, 0, {"a1", "a2", "a3", "b2"}),                 # experiment best only: b1
    (0, 0, 0, {"a1", "a2", "a3", "b1", "b2"}),
    (2, 0, 0, {"a1", "a3", "b2"}),
])
def test_gc_policy(exp_best, trial_best, trial_latest, expected):
    assert to_delete(CKPTS, save_experiment_best=exp_best, save_trial_best=trial_best,
                     save_trial_latest=trial_latest, smaller_is_better=True) == expected


def test_gc_keeps_latest_of_live_trial_even_with_zero_latest():
    ck = [C("a1", 1, 10, 0.9, live=True), C("a2", 1, 20, None, live=True)]
    assert to_delete(ck, save_experiment_best=0, save_trial_best=0, save_trial_latest=0,
                     smaller_is_better=True) == {"a1"}


def test_gc_larger_is_better():
    assert to_delete(CKPTS, save_experiment_best=1, save_trial_best=0, save_trial_latest=0,
                     smaller_is_better=False) == {"a2", "a3", "b1", "b2"}


def test_read_new_lines_leaves_partial_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    chunk = read_new_lines(p, 0)
    assert [r for r in chunk.records] == [{"a": 1}, {"b": 2}]
    assert chunk.new_offset == len(b'{"a": 1}\n{"b": 2}\n')
    with open(p, "ab") as f:
        f.write(b'3}\nnot json\n')
    chunk2 = read_new_lines(p, chunk.new_offset)
    assert chunk2.records == [{"c": 3}]
    assert chunk2.new_offset == p.stat().st_size
    assert read_new_lines(tmp_path / "missing", 5).new_offset == 5


@pytest.mark.parametrize("metrics,value", [
    ({"loss": 1}, 1.0), ({"loss": 0.5}, 0.5), ({"loss": None}, None), ({"loss": True}, None),
    ({"x": 1}, None), ({"loss": "1"}, None),
])
def test_metric_value(metrics, value):
    assert metric_value(metrics, "loss") == value
