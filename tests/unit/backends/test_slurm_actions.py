"""Pure pieces of ``dethpc.backends.slurm_actions``: the argv of cancel, requeue and
throttle, and which stderr lines of a failed action are harmless."""

from __future__ import annotations

import pytest

from dethpc.backends.base import JobAction
from dethpc.backends.slurm_actions import (
    action_argv,
    cancel_argv,
    grouped,
    harmless_errors,
    throttle_argv,
)


@pytest.mark.parametrize(("refs", "signal", "flags", "argv"), [
    (["1_0", "2"], None, (), ["scancel", "1_0", "2"]),
    (["1_0", "2"], None, ("--batch",), ["scancel", "1_0", "2"]),   # flags only with a signal
    (["3"], "USR2", (), ["scancel", "--signal=USR2", "3"]),
    (["3", "4_1"], "USR2", ("--batch",), ["scancel", "--signal=USR2", "--batch", "3", "4_1"]),
    (["3"], "TERM", ("--full",), ["scancel", "--signal=TERM", "--full", "3"]),
])
def test_cancel_argv(refs: list[str], signal: str | None, flags: tuple[str, ...],
                     argv: list[str]) -> None:
    assert cancel_argv(refs, signal, flags) == argv


@pytest.mark.parametrize(("refs", "action", "argv"), [
    (["4_1"], JobAction.REQUEUE, ["scontrol", "requeue", "4_1"]),
    (["4_1", "5"], JobAction.REQUEUE, ["scontrol", "requeue", "4_1,5"]),
    (["4_1", "5"], JobAction.RELEASE, ["scontrol", "release", "4_1,5"]),
])
def test_action_argv(refs: list[str], action: JobAction, argv: list[str]) -> None:
    assert action_argv(refs, action) == argv


@pytest.mark.parametrize(("limit", "arg"), [(3, "ArrayTaskThrottle=3"), (0, "ArrayTaskThrottle=0"),
                                            (-2, "ArrayTaskThrottle=0")])
def test_throttle_argv(limit: int, arg: str) -> None:
    assert throttle_argv("6", limit) == ["scontrol", "update", "JobId=6", arg]


@pytest.mark.parametrize(("stderr", "errors"), [
    ("scancel: error: Kill job error on job id 1: Job/step already completing or completed\n",
     ["scancel: error: Kill job error on job id 1: Job/step already completing or completed"]),
    ("scancel: error: Invalid job id specified\n\n  \nscontrol: Job is pending execution\n",
     ["scancel: error: Invalid job id specified", "scontrol: Job is pending execution"]),
    ("Job has already finished", ["Job has already finished"]),
    ("Requested operation is presently disabled", ["Requested operation is presently disabled"]),
    # one real error among harmless ones: a failure
    ("scancel: error: Invalid job id specified\nscancel: error: Access/permission denied\n", None),
    ("", None),                                   # failed without saying why: a failure
    ("   \n", None),
])
def test_harmless_errors(stderr: str, errors: list[str] | None) -> None:
    assert harmless_errors(stderr) == errors


def test_the_launched_steps_of_squeue_steps() -> None:
    """``squeue --steps`` of a hung array task, a plain job and a het job: the srun steps,
    never the batch shell or the other pseudo-steps (KILL to those ends the job)."""
    from dethpc.backends.slurm_actions import launched_steps, steps_argv

    out = "1244_0.0\n1244_0.batch\n1244_0.1\n1244_0.extern\n99.0\n99.interactive\n7+1.0\n\n"
    assert launched_steps(out) == ["1244_0.0", "1244_0.1", "99.0", "7+1.0"]
    assert launched_steps("") == []
    assert steps_argv(["1244_0", "99"]) == ["squeue", "--steps", "--noheader", "--format=%i",
                                            "--jobs", "1244_0,99"]


@pytest.mark.parametrize(("refs", "out"), [
    ([], []),
    (["1_0", "2"], ["1_0", "2"]),                        # a lone task stays as it is
    (["7_3", "7_1", "7_2", "7_9"], ["7_[1-3,9]"]),       # one bracket, ranges sorted
    (["7_5", "8", "7_6", "9_1", "9_3", "8+1"], ["7_[5-6]", "8", "9_[1,3]", "8+1"]),
    (["7", "7_1", "7_2"], ["7", "7_[1-2]"]),             # the array's own id is kept apart
    (["7_1", "7_1", "7_2"], ["7_[1-2]"]),                # a ref named twice, once
    (["7_1", "7_1"], ["7_1", "7_1"]),                     # one task: as given
    (["7_[1-2]", "7_4"], ["7_[1-2]", "7_4"]),           # a bracket form given stays
])
def test_an_arrays_tasks_are_one_bracket_form(refs: list[str], out: list[str]) -> None:
    """scancel of ``7_1 7_2 7_3`` is three KILL_JOB RPCs, of ``7_[1-3]`` one (sdiag,
    22.05): the pool's surplus workers are cancelled in one."""
    assert grouped(refs) == out
    assert cancel_argv(refs, "USR2", ("--batch",)) == ["scancel", "--signal=USR2", "--batch",
                                                       *out]
