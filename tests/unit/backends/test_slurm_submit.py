"""Pure pieces of ``dethpc.backends.slurm_submit``: the sbatch command line, the
``--export`` argument, what sbatch's refusals mean, and the refs of a submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dethpc.backends.base import JobRequest
from dethpc.backends.slurm_submit import export_arg, sbatch_argv, submit_error, submitted_refs
from dethpc.common.errors import CommandError, SubmitError, SubmitLimitError

HEAD = ["--chdir=/w", "--job-name=n", "--comment=dethpc:exp=1:batch=2"]


def req(**kw: Any) -> JobRequest:
    return JobRequest(name="n", comment="dethpc:exp=1:batch=2", script=Path("/w/job.sbatch"),
                      workdir=Path("/w"), **kw)


class NotAsked:
    """A MaxArraySize that must not be asked (the request is not an array)."""

    def __call__(self) -> int:
        raise AssertionError("MaxArraySize asked for a request that is not an array")


@pytest.mark.parametrize(("request_", "mode", "tail"), [
    (req(), "--parsable", ["/w/job.sbatch"]),
    (req(), "--test-only", ["/w/job.sbatch"]),
    (req(array_indices=(3, 1, 1, 0, 2, 7)), "--parsable", ["--array=0-3,7", "/w/job.sbatch"]),
    (req(array_indices=(0, 1), throttle=4), "--parsable", ["--array=0-1%4", "/w/job.sbatch"]),
    (req(array_indices=(999,), throttle=0), "--parsable", ["--array=999", "/w/job.sbatch"]),
    (req(env={"A": "1", "B": "x y"}, extra_args=("--partition=low", "-q", "x")), "--parsable",
     ["--export=ALL,A=1,B=x y", "--partition=low", "-q", "x", "/w/job.sbatch"]),
    # the output path the caller follows (an interactive task's job.log)
    (req(output=Path("/t/7/job.log")), "--parsable", ["--output=/t/7/job.log", "/w/job.sbatch"]),
])
def test_sbatch_argv(request_: JobRequest, mode: str, tail: list[str]) -> None:
    asked = NotAsked() if not request_.array_indices else (lambda: 1000)
    assert sbatch_argv(request_, mode, asked) == ["sbatch", mode, *HEAD, *tail]


@pytest.mark.parametrize(("indices", "limit", "error"), [
    ((0, 1000), 1001, None),
    ((0, 1001), 1001, "array index 1001 is above this cluster's MaxArraySize-1 (1000); "
                      "submit smaller batches"),
    ((5,), 5, "array index 5 is above this cluster's MaxArraySize-1 (4)"),
])
def test_sbatch_argv_keeps_arrays_under_max_array_size(indices: tuple[int, ...], limit: int,
                                                       error: str | None) -> None:
    if error is None:
        assert sbatch_argv(req(array_indices=indices), "--parsable", lambda: limit)
    else:
        with pytest.raises(SubmitError) as got:
            sbatch_argv(req(array_indices=indices), "--parsable", lambda: limit)
        assert error in str(got.value)


@pytest.mark.parametrize(("env", "expected"), [
    ({}, []),
    ({"A": "1"}, ["--export=ALL,A=1"]),
    ({"A": "1", "B": ""}, ["--export=ALL,A=1,B="]),
    ({"A": "1,2"}, SubmitError),
    ({"A,B": "1"}, SubmitError),
])
def test_export_arg(env: dict[str, str], expected: list[str] | type[Exception]) -> None:
    if isinstance(expected, list):
        assert export_arg(req(env=env)) == expected
    else:
        with pytest.raises(expected, match="has a comma, which sbatch --export cannot carry"):
            export_arg(req(env=env))


LIMIT = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
         "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or "
         "time limits)")


@pytest.mark.parametrize(("stderr", "kind", "message"), [
    (LIMIT, SubmitLimitError, "sbatch refused the job over a limit "
                              "(QOSMaxSubmitJobPerUserLimit): " + LIMIT),
    ("sbatch: error: Batch job submission failed: Invalid partition name specified\n",
     SubmitError, "sbatch refused the job: sbatch: error: Batch job submission failed: "
                  "Invalid partition name specified"),
    ("sbatch: error: Invalid qos specification", SubmitError, "sbatch refused the job: "),
    ("sbatch: error: Invalid account or account/partition combination specified",
     SubmitError, "sbatch refused the job: "),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not "
     "available", SubmitError, "(the allocation cannot fit the partition's nodes)"),
    ("sbatch: error: Batch job submission failed: Socket timed out", CommandError, None),
    ("sbatch: unrecognized option '--frob'\nTry \"sbatch --help\" for more information\n",
     SubmitError, "sbatch refused the job: sbatch: unrecognized option '--frob' (an option "
                  "of the pool's or the experiment's sbatch_args)"),
])
def test_submit_error(stderr: str, kind: type[Exception], message: str | None) -> None:
    exc = CommandError(("sbatch", "--parsable"), 1, "", stderr)
    got = submit_error(exc)
    assert type(got) is kind
    if message is None:
        assert got is exc
    else:
        assert message in str(got)


@pytest.mark.parametrize(("job", "indices", "refs"), [
    ("42", (), ["42"]),
    ("42", (2, 0, 2), ["42_0", "42_2"]),
    ("42", (5,), ["42_5"]),
])
def test_submitted_refs(job: str, indices: tuple[int, ...], refs: list[str]) -> None:
    assert submitted_refs(job, req(array_indices=indices)) == refs
