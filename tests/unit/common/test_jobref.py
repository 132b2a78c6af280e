"""The one job reference (``dethpc.common.jobref``): printed as Slurm takes it, read from
the batch script's environment the way the backend recorded it at submit."""

from __future__ import annotations

import pytest

from dethpc.common.jobref import JobId, parse_job_id, ref_from_env, sort_key


@pytest.mark.parametrize(("text", "ref"), [
    ("123", "123"), ("123_4", "123_4"), ("123+1", "123+1"), (" 77 ", "77"),
])
def test_ref_names_one_job(text: str, ref: str) -> None:
    assert parse_job_id(text).ref == ref
    assert str(parse_job_id(text)) == ref


@pytest.mark.parametrize("text", ["123_[1-3]", "123.batch", "123_4.0"])
def test_ranges_and_steps_name_no_single_job(text: str) -> None:
    with pytest.raises(ValueError, match="names no single job"):
        _ = parse_job_id(text).ref


@pytest.mark.parametrize("text", ["123_[1,3-5%2]", "123+1", "123_4.batch", "9.0"])
def test_str_prints_what_it_parsed(text: str) -> None:
    assert str(parse_job_id(text)) == text
    assert parse_job_id(str(parse_job_id(text))) == parse_job_id(text)


@pytest.mark.parametrize(("env", "ref"), [
    # an array task: the array's id and the task, never the task's own job id
    ({"SLURM_JOB_ID": "125", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "5"}, "120_5"),
    # the array's first task, whose own id is the array's
    ({"SLURM_JOB_ID": "120", "SLURM_ARRAY_JOB_ID": "120", "SLURM_ARRAY_TASK_ID": "0"}, "120_0"),
    # a plain job, and a heterogeneous job's batch script (its leader's id): no task
    ({"SLURM_JOB_ID": "130"}, "130"),
    ({"SLURM_JOB_ID": "131", "SLURM_HET_JOB_ID": "131", "SLURM_HET_SIZE": "2"}, "131"),
    ({"SLURM_JOB_ID": "132", "SLURM_ARRAY_JOB_ID": ""}, "132"),
    ({}, "0"),
])
def test_ref_from_env_is_the_ref_recorded_at_submit(env: dict[str, str], ref: str) -> None:
    assert ref_from_env(env) == ref


def test_sort_key_orders_jobs_then_tasks() -> None:
    refs = ["10_10", "9_1", "100", "10_2", "9", "10", "x"]
    assert sorted(refs, key=sort_key) == ["x", "9", "9_1", "10", "10_2", "10_10", "100"]


def test_refs_expand_ranges() -> None:
    assert JobId("5", tasks=(1, 2)).refs() == ["5_1", "5_2"]
    assert JobId("5", het_offset=1).refs() == ["5+1"]
