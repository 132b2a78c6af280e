"""Table-driven tests of the pure Slurm parsers (no Slurm needed)."""

from __future__ import annotations

import pytest

from dethpc.backends.base import JobState
from dethpc.backends.slurm_parse import (
    STATE_TABLE,
    map_state,
    parse_exit_code,
    parse_gres_gpus,
    parse_key_values,
    parse_sacct,
    parse_sbatch_parsable,
    parse_sinfo,
    parse_squeue,
    parse_version,
    parse_wait_status,
    unique_bases,
)
from dethpc.common.jobref import JobId, format_array, parse_array_spec, parse_job_id
from dethpc.common.sbatch_options import parse_time

S = JobState
STATES = [
    ("PENDING", S.PENDING), ("PD", S.PENDING), ("CONFIGURING", S.PENDING), ("CF", S.PENDING),
    ("RUNNING", S.RUNNING), ("R", S.RUNNING), ("COMPLETING", S.RUNNING), ("CG", S.RUNNING),
    ("STAGE_OUT", S.RUNNING), ("SO", S.RUNNING), ("RESIZING", S.RUNNING), ("RS", S.RUNNING),
    ("SIGNALING", S.RUNNING), ("SI", S.RUNNING),
    ("REQUEUED", S.PENDING), ("RQ", S.PENDING), ("REQUEUE_HOLD", S.PENDING), ("RH", S.PENDING),
    ("REQUEUE_FED", S.PENDING), ("RF", S.PENDING), ("RESV_DEL_HOLD", S.PENDING),
    ("RD", S.PENDING),
    ("SPECIAL_EXIT", S.FAILED), ("SE", S.FAILED),
    ("PREEMPTED", S.PREEMPTED), ("PR", S.PREEMPTED),
    ("SUSPENDED", S.SUSPENDED), ("S", S.SUSPENDED), ("STOPPED", S.SUSPENDED), ("ST", S.SUSPENDED),
    ("COMPLETED", S.COMPLETED), ("CD", S.COMPLETED),
    ("CANCELLED", S.CANCELLED), ("CA", S.CANCELLED), ("CANCELLED by 0", S.CANCELLED),
    ("CANCELLED by 1000", S.CANCELLED), ("CANCELLED+", S.CANCELLED),
    ("FAILED", S.FAILED), ("F", S.FAILED), ("TIMEOUT", S.TIMEOUT), ("TO", S.TIMEOUT),
    ("NODE_FAIL", S.NODE_FAIL), ("NF", S.NODE_FAIL),
    ("OUT_OF_MEMORY", S.OUT_OF_MEMORY), ("OOM", S.OUT_OF_MEMORY),
    ("BOOT_FAIL", S.FAILED), ("BF", S.FAILED), ("DEADLINE", S.CANCELLED), ("DL", S.CANCELLED),
    ("REVOKED", S.CANCELLED),
    ("running", S.RUNNING), ("  PENDING ", S.PENDING), ("", S.UNKNOWN), ("WHATEVER", S.UNKNOWN),
]


@pytest.mark.parametrize(("raw", "expected"), STATES)
def test_map_state(raw: str, expected: JobState) -> None:
    assert map_state(raw) is expected


def test_state_table_covers_every_listed_state() -> None:
    listed = {raw.split(" ")[0].rstrip("+").strip().upper() for raw, _ in STATES} - {"", "WHATEVER"}
    assert listed <= set(STATE_TABLE)


@pytest.mark.parametrize(("text", "expected"), [
    ("0:0", (0, None)), ("2:0", (2, None)), ("0:15", (0, 15)), ("137:9", (137, 9)),
    ("", (None, None)), ("x:y", (None, None)), ("1", (1, None)),
])
def test_parse_exit_code(text: str, expected: tuple[int | None, int | None]) -> None:
    assert parse_exit_code(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("123", JobId("123")),
    ("123_4", JobId("123", task=4)),
    ("123_[2-4%25]", JobId("123", tasks=(2, 3, 4), throttle=25)),
    ("123_[1,3,5-7]", JobId("123", tasks=(1, 3, 5, 6, 7))),
    ("123+0", JobId("123", het_offset=0)),
    ("123+1", JobId("123", het_offset=1)),
    ("123.batch", JobId("123", step="batch")),
    ("123_4.0", JobId("123", task=4, step="0")),
    (" 77 ", JobId("77")),
])
def test_parse_job_id(text: str, expected: JobId) -> None:
    assert parse_job_id(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "12_x", "12_[", "_4", "12__4"])
def test_parse_job_id_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_job_id(bad)


@pytest.mark.parametrize(("text", "refs"), [
    ("123", ["123"]), ("123_4", ["123_4"]), ("123_[1,3]", ["123_1", "123_3"]),
    ("9_[0-2%1]", ["9_0", "9_1", "9_2"]), ("5+1", ["5+1"]),
])
def test_job_id_refs(text: str, refs: list[str]) -> None:
    assert parse_job_id(text).refs() == refs


@pytest.mark.parametrize(("spec", "expected"), [
    ("0-9%4", (tuple(range(10)), 4)),
    ("0-3,7,9-10%4", ((0, 1, 2, 3, 7, 9, 10), 4)),
    ("1,3,5-7", ((1, 3, 5, 6, 7), None)),
    ("0-8:2", ((0, 2, 4, 6, 8), None)),
    ("5", ((5,), None)),
    ("3,1,3", ((1, 3), None)),
])
def test_parse_array_spec(spec: str, expected: tuple[tuple[int, ...], int | None]) -> None:
    assert parse_array_spec(spec) == expected


@pytest.mark.parametrize("bad", ["5-3", "a-b", "0-4:0"])
def test_parse_array_spec_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_array_spec(bad)


@pytest.mark.parametrize(("indices", "throttle", "spec"), [
    (range(10), 4, "0-9%4"),
    ([0, 1, 2, 3, 7, 9, 10], 4, "0-3,7,9-10%4"),
    ([5], None, "5"),
    ([3, 1, 2], None, "1-3"),
    ([1, 3, 5], 0, "1,3,5"),
    ([2, 2, 4], None, "2,4"),
])
def test_format_array(indices: list[int], throttle: int | None, spec: str) -> None:
    assert format_array(indices, throttle) == spec
    assert parse_array_spec(spec) == (tuple(sorted(set(indices))), throttle or None)


@pytest.mark.parametrize("bad", [[], [-1, 2]])
def test_format_array_rejects(bad: list[int]) -> None:
    with pytest.raises(ValueError):
        format_array(bad)


@pytest.mark.parametrize(("out", "job"), [
    ("123\n", "123"), ("123;cluster\n", "123"), ("warning: x\n456\n", "456"),
])
def test_parse_sbatch_parsable(out: str, job: str) -> None:
    assert parse_sbatch_parsable(out) == job


@pytest.mark.parametrize("bad", ["", "Submitted batch job 12", "x;y"])
def test_parse_sbatch_parsable_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_sbatch_parsable(bad)


def test_parse_squeue() -> None:
    text = (
        "100_0|RUNNING|0|0|None|n1|normal|dethpc|exp-b1|dethpc:exp=1:batch=1\n"
        "100_1|PENDING|0|2|Resources||normal|dethpc|exp-b1|dethpc:exp=1:batch=1\n"
        "100_[4-5%2]|PENDING|0|0|JobArrayTaskLimit||limited|ml-team|exp-b1|(null)\n"
        "101|COMPLETED|0|0|None|n[1-2]|normal|dethpc|single|a|b\n"
        "102_3|FAILED|512|1|NonZeroExitCode|n1|normal|dethpc|x|\n"
        "103|CANCELLED|9|0|None|n1|(null)||x|\n"
        "104|RUNNING|0|0|None|n1|x|the old format, without QoS and account\n"
        "garbage line\n"
    )
    infos = {i.ref: i for i in parse_squeue(text)}
    assert list(infos) == ["100_0", "100_1", "100_4", "100_5", "101", "102_3", "103"]
    assert infos["100_0"].state is S.RUNNING and infos["100_0"].nodes == "n1"
    assert infos["100_0"].exit_code is None
    assert infos["100_1"].reason == "Resources" and infos["100_1"].nodes == ""
    assert infos["100_1"].restart_count == 2
    assert infos["100_4"].comment == "" and infos["100_4"].reason == "JobArrayTaskLimit"
    assert infos["101"].comment == "a|b" and infos["101"].exit_code == 0
    assert infos["100_0"].reason == ""
    assert (infos["102_3"].state, infos["102_3"].exit_code) == (S.FAILED, 2)
    assert (infos["103"].exit_code, infos["103"].signal) == (0, 9)
    assert (infos["100_0"].qos, infos["100_0"].account) == ("normal", "dethpc")
    assert (infos["100_5"].qos, infos["100_5"].account) == ("limited", "ml-team")
    assert (infos["103"].qos, infos["103"].account) == ("", "")


@pytest.mark.parametrize(("text", "expected"), [
    ("0", (0, None)), ("256", (1, None)), ("512", (2, None)), ("9", (0, 9)),
    ("15", (0, 15)), ("N/A", (None, None)), ("", (None, None)),
    # Slurm 25.11 prints code:signal (tests/golden/slurm/25.11/squeue_jobs.txt)
    ("3:0", (3, None)), ("0:15", (0, 15)), ("0:0", (0, None)),
])
def test_parse_wait_status(text: str, expected: tuple[int | None, int | None]) -> None:
    assert parse_wait_status(text) == expected


def test_parse_sacct() -> None:
    text = (
        "200_0|COMPLETED|0:0|None|n1|exp|c\n"
        "200_1|FAILED|3:0|NonZeroExitCode|n2|exp|c\n"
        "200_2|CANCELLED by 0|0:15|None|n1|exp|\n"
        "200_2.batch|CANCELLED|0:15||n1|batch|\n"
        "200_[3-4]|CANCELLED by 0|0:0|None|None assigned|exp|\n"
        "201|REQUEUED|0:0|None|n1|x|\n"
        "201|TIMEOUT|0:0|TimeLimit|n1|x|\n"
    )
    infos = {i.ref: i for i in parse_sacct(text)}
    assert set(infos) == {"200_0", "200_1", "200_2", "200_3", "200_4", "201"}
    assert (infos["200_1"].state, infos["200_1"].exit_code) == (S.FAILED, 3)
    assert (infos["200_2"].state, infos["200_2"].signal) == (S.CANCELLED, 15)
    assert infos["200_2"].raw_state == "CANCELLED by 0"
    assert infos["200_3"].state is S.CANCELLED
    assert infos["201"].state is S.TIMEOUT  # last record of a requeued job wins


def test_parse_key_values() -> None:
    text = (
        "Configuration data as of 2026-01-01T00:00:00\n"
        "AccountingStorageType   = accounting_storage/slurmdbd\n"
        "MaxArraySize            = 10001\n"
        "SchedulerParameters     = sched_min_interval=0,bf_interval=1\n"
        "\n"
        "Cgroup Support Configuration:\n"
    )
    kv = parse_key_values(text)
    assert kv["MaxArraySize"] == "10001"
    assert kv["SchedulerParameters"] == "sched_min_interval=0,bf_interval=1"
    assert kv["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert "Configuration data as of 2026-01-01T00:00:00" not in kv


@pytest.mark.parametrize(("text", "expected"), [
    ("slurm 22.05.8", (22, 5)), ("slurm-wlm 25.11.0", (25, 11)), ("nothing", None),
])
def test_parse_version(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize(("gres", "gpus"), [
    ("(null)", 0), ("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8), ("gpu:a100:2,gpu:v100:2", 4),
    ("mps:100,gpu:2", 2), ("gpu:tesla", 1), ("", 0), ("gpu:a100:4(IDX:0,2-3)", 4),
])
def test_parse_gres_gpus(gres: str, gpus: int) -> None:
    assert parse_gres_gpus(gres) == gpus


@pytest.mark.parametrize(("text", "seconds"), [
    ("infinite", None), ("UNLIMITED", None), ("", None), ("30", 1800), ("30:15", 1815),
    ("1:00:00", 3600), ("1-00:00:00", 86400), ("2-3", 2 * 86400 + 3 * 3600),
    ("1-2:30", 86400 + 2 * 3600 + 30 * 60),
])
def test_parse_slurm_time(text: str, seconds: int | None) -> None:
    assert parse_time(text) == seconds


def test_parse_sinfo_merges_groups() -> None:
    text = "debug|4|16|(null)|infinite\ngpu|2|32|gpu:a100:4|1-00:00:00\ngpu|1|8|gpu:1|1-00:00:00\n"
    parts = parse_sinfo(text)
    assert set(parts) == {"debug", "gpu"}
    assert parts["debug"].nodes == 4 and parts["debug"].time_limit_s is None
    assert parts["gpu"].nodes == 3
    assert parts["gpu"].nodes_fitting(cpus=16, gpus=4) == 2
    assert parts["gpu"].nodes_fitting(cpus=1, gpus=1) == 3
    assert parts["gpu"].time_limit_s == 86400


def test_unique_bases() -> None:
    assert unique_bases(["5_1", "5_2", "7", "6+0", "5_3"]) == ["5", "7", "6"]
