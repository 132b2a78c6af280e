"""The one job reference (``dethpc.common.jobref``): printed as Slurm takes it, read from
the batch script's environment the way the backend recorded it at submit."""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from dethpc.common.jobref import (
    JobId,
    JobRef,
    base_job_id,
    canonical_ref,
    job_refs,
    parse_job_id,
    ref_from_env,
    sort_key,
    task_refs,
)


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


# ------------------------------------------------------------------ JobRef
@pytest.mark.parametrize(("ref", "text"), [
    (JobRef("123"), "123"),
    (JobRef("123", task=4), "123_4"),
    (JobRef("123", task=0), "123_0"),
    (JobRef("123", het=1), "123+1"),
    (JobRef("123", het=0), "123+0"),
])
def test_jobref_prints_as_slurm_takes_it_and_parses_back(ref: JobRef, text: str) -> None:
    assert str(ref) == text
    assert JobRef.parse(text) == ref
    assert parse_job_id(text).ref == text          # JobId names the same job alike


@pytest.mark.parametrize(("text", "ref"), [
    (" 77 ", JobRef("77")), ("120_5", JobRef("120", task=5)), ("9+2", JobRef("9", het=2)),
])
def test_jobref_parse(text: str, ref: JobRef) -> None:
    assert JobRef.parse(text) == ref


@pytest.mark.parametrize("text", ["123_[1-3]", "123.batch", "123_4.0", "x", "", "12a"])
def test_jobref_parse_refuses_what_names_no_single_job(text: str) -> None:
    with pytest.raises(ValueError):
        JobRef.parse(text)


def test_an_array_task_is_no_het_component() -> None:
    with pytest.raises(ValueError, match="no het component"):
        JobRef("1", task=0, het=0)


@pytest.mark.parametrize(("ref", "index", "task"), [
    (JobRef("42"), 3, "42_3"),
    (JobRef("42"), None, "42"),                    # no array: the job itself
    (JobRef("42", task=1), 3, "42_3"),             # a sibling task of the same array
])
def test_task_ref(ref: JobRef, index: int | None, task: str) -> None:
    assert str(ref.task_ref(index)) == task


def test_component() -> None:
    assert str(JobRef("42").component(0)) == "42+0"


@pytest.mark.parametrize(("base", "indices", "refs"), [
    ("42", (), ["42"]),
    ("42", (0, 2), ["42_0", "42_2"]),
    ("42", range(3), ["42_0", "42_1", "42_2"]),
])
def test_task_refs(base: str, indices: Iterable[int], refs: list[str]) -> None:
    assert task_refs(base, indices) == refs


def test_jobref_is_frozen_and_hashable() -> None:
    ref = JobRef("5", task=1)
    with pytest.raises(AttributeError):
        ref.task = 2  # type: ignore[misc]
    assert {ref, JobRef("5", task=1)} == {ref}


#: a job ref printed by hand: "<job>_<task>", "<het>+<offset>", "<ref>+0"
_HAND_PRINTED = re.compile(
    r'f"\{(?:[\w.]*\.)?(?:job\w*|\w*_job_id|array\w*|ref|base|het\w*)\}(?:_\{|\+\{|\+0")')


def test_refs_are_printed_by_jobref_alone() -> None:
    root = Path(__file__).resolve().parents[3] / "dethpc"
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}"
             for p in sorted(root.rglob("*.py")) if p.name != "jobref.py"
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if _HAND_PRINTED.search(line)]
    assert not found, "print job refs with dethpc.common.jobref.JobRef:\n" + "\n".join(found)


@pytest.mark.parametrize(("ref", "parts"), [
    (JobRef("123"), ("123", None, None)),
    (JobRef("123", task=4), ("123", 4, None)),
    (JobRef("123", het=0), ("123", None, 0)),
    (JobRef.parse("77_3"), ("77", 3, None)),
])
def test_jobref_is_its_text_with_its_parts_known(ref: JobRef, parts: tuple[object, ...]
                                                 ) -> None:
    """A ``JobRef`` is the text the store keeps and Slurm takes: it equals that text,
    finds what is keyed by it, and knows its parts; it survives a pickle."""
    text = str(ref)
    assert isinstance(ref, str) and ref == text and hash(ref) == hash(text)
    assert {text: 1}[ref] == 1 and {ref: 1}[text] == 1
    assert (ref.base, ref.task, ref.het) == parts
    assert repr(ref) == f"JobRef({text!r})" and type(str(ref)) is str
    back = pickle.loads(pickle.dumps(ref))
    assert type(back) is JobRef and back == ref and back.task == ref.task
    assert JobRef.parse(ref) is ref


def test_job_refs_reads_text_into_refs() -> None:
    refs = job_refs(["5_1", JobRef("6"), "7+0"])
    assert refs == ["5_1", "6", "7+0"] and all(type(r) is JobRef for r in refs)
    assert [r.task for r in refs] == [1, None, None]
    with pytest.raises(ValueError):
        job_refs(["item:1:t3-s0"])


@pytest.mark.parametrize(("text", "fast"), [
    ("123", True), ("123_4", True), ("123_0", True), ("123+1", True), ("0123_7", True),
    ("123_04", False), ("123+01", False), (" 77 ", False), ("77\n", False),
    ("123_[1-3]", False), ("123.batch", False), ("123_4.0", False), ("123+1_2", False),
    ("12\u00b3", False), ("\u0663", False), ("", False), ("item:1:2", False),
    ("123_", False), ("_4", False), ("123+", False),
])
def test_canonical_ref_reads_only_printed_forms_and_agrees_with_the_grammar(
        text: str, fast: bool) -> None:
    """The fast read takes a text only when it is a JobRef's printed form, and then gives
    what the grammar gives; every other text is left to the grammar (None)."""
    got = canonical_ref(text)
    assert (got is not None) is fast
    if got is not None:
        assert type(got) is JobRef and got == JobRef.parse(parse_job_id(text).ref)
        assert (got.base, got.task, got.het) == (
            parse_job_id(text).base, parse_job_id(text).task, parse_job_id(text).het_offset)
        assert base_job_id(text) == parse_job_id(text).base
