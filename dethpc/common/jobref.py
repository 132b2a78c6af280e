"""Slurm job references: parsed and printed here, and nowhere else.

Owns: the job-id grammar Slurm prints and accepts (``123``, ``123_4``,
``123_[2-4%25]``, ``123+1``, ``123.batch``) as ``JobId``; the one reference dethpc
keeps for a job it submitted, ``JobRef`` (an array task ``123_4``, a plain job
``123``, a heterogeneous job by its leader ``123``; a het component ``123+1`` only where
Slurm lists one): a ``str`` that is its one printed form, with its parts known; the
``Backend`` protocol takes and gives them (``submit``, ``poll``, ``cancel``, ``act``,
``JobInfo.ref``), the store's ``Job.ref`` column keeps that text and hands a ``JobRef``
back, ``scontrol``/``scancel`` take it as it is (``JobRef.parse``/``job_refs`` read
text into one); ``task_refs`` names an array's tasks; the reference
a running job has of itself (``ref_from_env``: the
store's job ref, the exit records' ``job`` and the ``scontrol`` target of a requeue are
this one string); array index specs (``parse_array_spec``/``format_array``).
Both sides of the job boundary use it: the backends parse Slurm's listings with it, the
job scripts' ``python -m dethpc.launch.run_end`` names the run's job with it.
Must not: run commands or read files. Pure, table-tested
(tests/unit/backends/test_slurm_parse.py, tests/unit/common/test_jobref.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_JOB_ID_RE = re.compile(
    r"^(?P<base>\d+)"
    r"(?:\+(?P<het>\d+))?"
    r"(?:_(?:(?P<task>\d+)|\[(?P<spec>[^\]]*)\]))?"
    r"(?:\.(?P<step>[\w+]+))?$"
)


class JobRef(str):
    """One job dethpc keeps: ``base`` the job id (an array's id for its tasks, a
    heterogeneous job's leader id), ``task`` an array task, ``het`` a het component.

    It *is* its printed form, the text Slurm takes and the store keeps (``123_4``,
    ``123+1``, ``123``): a ``str`` whose parts are known, so it passes wherever a job id
    as text does (``scancel`` argv, a dict key, a log line) and equals that text; the
    store's ``Job.ref`` column hands one back for every job's row
    (``dethpc.store.jobref_column``). Immutable and cheap: the job side imports this
    module."""

    __slots__ = ()

    def __new__(cls, base: str, task: int | None = None, het: int | None = None) -> JobRef:
        if task is not None and het is not None:
            raise ValueError(f"job {base}: an array task is no het component")
        text = f"{base}_{task}" if task is not None else (
            f"{base}+{het}" if het is not None else str(base))
        return super().__new__(cls, text)

    def __getnewargs__(self) -> tuple[str, int | None, int | None]:   # type: ignore[override]
        return self.base, self.task, self.het

    def __repr__(self) -> str:
        return f"JobRef({str(self)!r})"

    @property
    def base(self) -> str:
        """The job id: an array's for its tasks, a het job's leader's."""
        return self._parts()[0]

    @property
    def task(self) -> int | None:
        """The array task's index; None: no array task."""
        return self._parts()[1]

    @property
    def het(self) -> int | None:
        """The het component's offset; None: no het component."""
        return self._parts()[2]

    def _parts(self) -> tuple[str, int | None, int | None]:
        base, sep, task = self.rpartition("_")
        if sep and task.isdigit():
            return base, int(task), None
        base, sep, het = self.rpartition("+")
        if sep and het.isdigit():
            return base, None, int(het)
        return str(self), None, None

    @classmethod
    def parse(cls, text: str) -> JobRef:
        """``"123_4"`` -> ``JobRef("123", task=4)``; ``ValueError`` for a text that is no
        job id, or names no single job (a task range, a step)."""
        if isinstance(text, JobRef):
            return text
        ref = canonical_ref(text)
        if ref is not None:
            return ref
        jid = parse_job_id(text)
        if jid.tasks or jid.step is not None:
            raise ValueError(f"{text.strip()!r} names no single job")
        return cls(jid.base, task=jid.task, het=jid.het_offset)

    def task_ref(self, index: int | None) -> JobRef:
        """Task ``index`` of this array job; None: this job itself (it is no array)."""
        return self if index is None else JobRef(self.base, task=index)

    def component(self, offset: int) -> JobRef:
        """Component ``offset`` of this heterogeneous job (squeue lists ``123+0``...)."""
        return JobRef(self.base, het=offset)


def canonical_ref(text: str) -> JobRef | None:
    """``text`` as a ``JobRef`` when it already is one's printed form (``123``,
    ``123_4``, ``123+1``: ASCII digits, the task or component without a leading zero),
    read without the grammar's regular expression; None for any other text (``JobRef.parse``
    and ``parse_job_id`` read those). The store's ``Job.ref`` column and squeue print
    every job this way: 21,000 refs were parsed per tick at 10,000 trials
    (bench/tick_scale, issue 47 item 2)."""
    base, sep, rest = text.partition("_")
    if not sep:
        base, sep, rest = text.partition("+")
    if not (base.isascii() and base.isdigit()):
        return None
    if sep and not (rest.isascii() and rest.isdigit() and (rest == "0" or rest[0] != "0")):
        return None
    return str.__new__(JobRef, text)


def job_refs(refs: Iterable[str]) -> list[JobRef]:
    """``refs`` as ``JobRef``s (``JobRef.parse``: the ones that are already, as they are);
    ``ValueError`` for one that names no single job."""
    return [JobRef.parse(r) for r in refs]


def task_refs(base: str, indices: Iterable[int]) -> list[JobRef]:
    """The refs of array job ``base``'s tasks ``indices``, in that order; ``[base]`` when
    there are none (a job that is no array)."""
    job = JobRef(base)
    return [job.task_ref(i) for i in indices] or [job]


@dataclass(frozen=True)
class JobId:
    """One parsed Slurm job id.

    ``tasks`` is set for bracket forms (``123_[1,3-5%2]``), ``task`` for one
    array task (``123_4``), ``het_offset`` for heterogeneous components
    (``123+0``), ``step`` for step ids (``123.batch``).
    """

    base: str
    task: int | None = None
    tasks: tuple[int, ...] = ()
    throttle: int | None = None
    het_offset: int | None = None
    step: str | None = None

    @property
    def is_array_range(self) -> bool:
        return bool(self.tasks)

    @property
    def is_array_task(self) -> bool:
        return self.task is not None

    @property
    def ref(self) -> JobRef:
        """The one job this id names, as dethpc keeps it and ``scontrol`` takes it: an
        array task alone (``123_4``; the array's plain id would name every task), a het
        component (``123+1``), else the job (``123``). Steps and ranges have none."""
        if self.tasks or self.step is not None:
            raise ValueError(f"{self} names no single job")
        return JobRef(self.base, task=self.task,
                      het=self.het_offset if self.task is None else None)

    def __str__(self) -> str:
        text = self.base
        if self.het_offset is not None:
            text += f"+{self.het_offset}"
        if self.tasks:
            text += f"_[{format_array(self.tasks, self.throttle)}]"
        elif self.task is not None:
            text += f"_{self.task}"
        if self.step is not None:
            text += f".{self.step}"
        return text

    def refs(self) -> list[JobRef]:
        """The dethpc refs this id stands for (bracket forms expand to one per task)."""
        if self.tasks:
            return task_refs(self.base, self.tasks)
        return [JobId(self.base, task=self.task, het_offset=self.het_offset).ref]


def parse_job_id(text: str) -> JobId:
    """Parse a job id as Slurm prints it; raise ``ValueError`` when malformed."""
    m = _JOB_ID_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a Slurm job id: {text!r}")
    tasks: tuple[int, ...] = ()
    throttle = None
    if m["spec"] is not None:
        tasks, throttle = parse_array_spec(m["spec"])
    return JobId(
        base=m["base"],
        task=int(m["task"]) if m["task"] is not None else None,
        tasks=tasks,
        throttle=throttle,
        het_offset=int(m["het"]) if m["het"] is not None else None,
        step=m["step"],
    )


def base_job_id(ref: str) -> str:
    """"123_4" -> "123"; "123+1" -> "123"; "123" -> "123"."""
    if isinstance(ref, JobRef):
        return ref.base
    known = canonical_ref(ref)
    if known is not None:
        return known.base
    return parse_job_id(ref).base


def sort_key(ref: str) -> tuple[int, int]:
    """Sort key of a ref: job id, then task (a job without tasks first; a ref that is no
    job id first of all)."""
    try:
        jid = parse_job_id(ref)
    except ValueError:
        return (-1, -1)
    return int(jid.base), jid.task if jid.task is not None else -1


def ref_from_env(env: Mapping[str, str]) -> str:
    """The reference a job has of itself, from the variables Slurm gives its batch
    script: ``<array>_<task>`` for an array task, else ``SLURM_JOB_ID`` (a
    heterogeneous job's batch script runs in its leader, whose id is the job's). The
    same string the backend recorded at submit, so exit records and the store agree.
    Without Slurm (the local backend sets ``SLURM_JOB_ID`` itself, or nothing): "0"."""
    array, task = env.get("SLURM_ARRAY_JOB_ID", "").strip(), env.get("SLURM_ARRAY_TASK_ID", "")
    job = env.get("SLURM_JOB_ID", "").strip() or "0"
    try:
        if array and task.strip():
            return str(JobRef(parse_job_id(array).base, task=int(task)))
        return parse_job_id(job).ref
    except ValueError:  # not Slurm's (a hand-set variable): the job's id as it is
        return job


# ------------------------------------------------------------------ array specs
def parse_array_spec(spec: str) -> tuple[tuple[int, ...], int | None]:
    """"0-9:2,15%4" -> ((0, 2, 4, 6, 8, 15), 4). Indices sorted and unique."""
    throttle = None
    body = spec.strip()
    if "%" in body:
        body, _, thr = body.partition("%")
        throttle = int(thr)
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in body.split(","))):
        rng, _, step_s = part.partition(":")
        step = int(step_s) if step_s else 1
        if step < 1:
            raise ValueError(f"bad array step in {spec!r}")
        lo_s, _, hi_s = rng.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
        if hi < lo:
            raise ValueError(f"bad array range {part!r} in {spec!r}")
        out.update(range(lo, hi + 1, step))
    return tuple(sorted(out)), throttle


def format_array(indices: Iterable[int], throttle: int | None = None) -> str:
    """Indices -> sbatch ``--array`` spec, runs compressed: [0,1,2,3,7,9,10], 4 ->
    "0-3,7,9-10%4". A throttle of ``None`` or 0 means unlimited."""
    values = sorted(set(indices))
    if not values:
        raise ValueError("an array needs at least one index")
    if values[0] < 0:
        raise ValueError("array indices must be >= 0")
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    spec = ",".join(parts)
    return f"{spec}%{throttle}" if throttle else spec
