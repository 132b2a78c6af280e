"""``dethpc sbatch [sbatch options] script.sh [args...]``: a drop-in for ``sbatch``.

Owns: what the plain command submits (``PlainJob``: the user's script, its header
re-emitted in dethpc's wrapper, the additions, the array's task ids), the wrapper's text
(``wrapper_script``, sbatch_templates/sbatch_wrapper.sbatch.j2's text, written by
``dethpc.jobs.wrapper_text`` without Jinja2), the records of an
experiment of kind SBATCH (``record``/``unrecord``: written before sbatch runs, removed
when sbatch refuses; ``submit`` runs the one submission protocol over them, the job ids
confirmed by ``dethpc.control.submitters.SbatchLedger``), and what is printed
(``announce``: exactly sbatch's line). See docs/existing-scripts.md. The records go
through the models (a ``Store``) or, on an SQLite store at head, through ``sqlite3``
alone (``SqliteAtHead``, ``dethpc.store.sbatch_rows``: the same rows); what it needs of
the cluster config is an ``SbatchSite``. This module stays light (no ORM, YAML, config
parser or trial-script imports at module level): the console's light path
(``dethpc.surfaces.cli.fastsbatch``) runs it within issue 47's 0.15 s beside sbatch.

How the user's options reach Slurm unchanged: the command-line options go to the real
``sbatch`` as given (dethpc adds ``--parsable`` to read the job id and prints sbatch's own
line itself); the script's header (every line up to the first command) is re-emitted at
the top of the wrapper, so sbatch parses the user's ``#SBATCH`` lines by its own rules;
``SBATCH_*`` variables reach sbatch in the environment it runs in. dethpc's additions
(``--requeue``, ``--signal=B:<sig>@<grace>``) follow the header, each only when the user
set neither it nor its opposite anywhere. The wrapper is named as the script, so the
default job name is the script's, as with sbatch. The job name stays the user's: the
key a restarted daemon finds the job by is a ``--comment`` (``sbatch_comment``) added
on sbatch's command line unless the user set a comment.

Must not: run sbatch itself (``submit`` takes a ``CommandRunner``), or decide the
trial's end (the daemon does, from the wrapper's exit records and Slurm).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dethpc.backends.slurm_commands import run_sbatch
from dethpc.common.errors import CommandError, DethpcError, SubmitLimitError
from dethpc.common.jobref import JobRef
from dethpc.common.kinds import EventKind, ExperimentKind
from dethpc.common.paths import ExperimentPaths, make_run_dir
from dethpc.common.runner import CommandResult, CommandRunner
from dethpc.common.sbatch_options import canonical_option, option_value
from dethpc.control.submission import send
from dethpc.control.submitters import MARKER, SbatchLedger, submitting
from dethpc.jobs.directives import dethpc_directives
from dethpc.store.new_experiment import NewExperiment, SqliteAtHead
from dethpc.surfaces.sbatchwrap.arrays import ArraySpec, parse_array
from dethpc.surfaces.sbatchwrap.search_cli import (
    MAX_IDLE_OPTION,
    SearchCommand,
    UsageError,
    submission_options,
)
from dethpc.surfaces.sbatchwrap.shim import write_shim
from dethpc.surfaces.sbatchwrap.site import SbatchSite, SitePool, site_of

if TYPE_CHECKING:
    from dethpc.config.model import ClusterConfig
    from dethpc.store import Store

TEMPLATE = "sbatch_wrapper.sbatch.j2"
#: ``#DETHPC --forward-signal`` in the script's header, or ``--forward-signal`` before it
FORWARD_OPTION = "--forward-signal"
#: how dethpc's own header lines start (``#DETHPC --max-idle 600``)
DETHPC_PREFIX = "#DETHPC"
#: the header line that opts a script in from the inside
FORWARD_LINE = f"{DETHPC_PREFIX} {FORWARD_OPTION}"
#: options that make sbatch print and exit without a job: passed straight through
INFO_OPTIONS = frozenset({"--help", "--usage", "--version"})
INFO_SHORT = frozenset({"-h", "-V"})
#: Slurm's requeues after failures a job may take (Determined's default max_restarts)
MAX_RESTARTS = 5
#: the batch name prefix of a ``dethpc sbatch`` experiment
#: sbatch's own refusal of a file without an interpreter line (sbatch 22.05)
NOT_A_SCRIPT = ("sbatch: error: This does not look like a batch script.  The first\n"
                "sbatch: error: line must start with #! followed by the path to an "
                "interpreter.\nsbatch: error: For instance: #!/bin/sh")


class NotABatchScript(DethpcError):
    exit_code = 1


@dataclass(frozen=True)
class ScriptSource:
    """The batch script as sbatch would read it: its job-name-giving file name, its text."""

    name: str
    text: str
    path: Path | None = None
    from_stdin: bool = False


def script_source(cmd: SearchCommand, cwd: Path, stdin_text: str | None) -> ScriptSource:
    """The script file, ``--wrap``'s command as sbatch makes it a script, or stdin."""
    wrap = next((option_value(o) for o in cmd.options if canonical_option(o) == "--wrap"),
                None)
    if wrap is not None:
        if cmd.script is not None:
            raise UsageError("--wrap and a script file cannot both be given (as with sbatch)")
        return ScriptSource("wrap", "#!/bin/sh\n# This script was created by sbatch "
                                    f"--wrap.\n\n{wrap}\n")
    if cmd.script is None or str(cmd.script) == "-":
        if stdin_text is None:
            raise UsageError("no script given: dethpc sbatch [sbatch options] script.sh "
                             "[args...] (or the script on standard input)")
        return ScriptSource("sbatch", stdin_text, from_stdin=True)
    path = cmd.script if cmd.script.is_absolute() else cwd / cmd.script
    try:
        return ScriptSource(cmd.script.name, path.read_text(encoding="utf-8",
                                                            errors="surrogateescape"), path)
    except OSError as exc:
        raise DethpcError(f"sbatch: error: Unable to open file {cmd.script}: "
                          f"{exc.strerror or exc}") from None


def header_of(text: str) -> str:
    """The script's header as sbatch reads its ``#SBATCH`` lines (from the top to the
    first line that is neither blank nor a comment), its interpreter line replaced by
    ``#!/bin/bash`` (the wrapper's shell; the script keeps its own when it runs)."""
    lines = text.splitlines()
    out = ["#!/bin/bash"]
    for line in lines[1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        out.append(line)
    while len(out) > 1 and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def check_batch_script(source: ScriptSource) -> None:
    if not source.text.startswith("#!"):
        raise NotABatchScript(NOT_A_SCRIPT)


def forward_requested(cmd: SearchCommand, text: str) -> bool:
    return cmd.forward_signal or any(line.strip() == FORWARD_LINE
                                     for line in header_of(text).splitlines())


def max_idle_requested(cmd: SearchCommand, source: ScriptSource) -> float | str | None:
    """The hang watchdog's allowance for the script's output, from ``--max-idle`` or
    else the header's last ``#DETHPC --max-idle VALUE`` (or ``=VALUE``): ``"auto"``,
    seconds > 0, or None (not watched)."""
    value, where = cmd.max_idle, f"{MAX_IDLE_OPTION} (before the script)"
    if value is None:
        for line in header_of(source.text).splitlines():
            words = line.strip().replace("=", " ", 1).split()
            if words[:2] == [DETHPC_PREFIX, MAX_IDLE_OPTION]:
                value = words[2] if len(words) == 3 else " ".join(words[2:])
                where = f"'{DETHPC_PREFIX} {MAX_IDLE_OPTION}' in {source.name}"
    if value is None:
        return None
    if value == "auto":
        return value
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise UsageError(f"{where}: expected auto or a number of seconds > 0, got "
                         f"{value!r} (the longest the script's output may stay unchanged "
                         "before the job is requeued as hung)")
    return seconds


@dataclass(frozen=True)
class PlainJob:
    """Everything ``dethpc sbatch`` submits, decided before anything is written."""

    source: ScriptSource
    args: tuple[str, ...]
    #: the user's command-line options, as words for the real sbatch
    sbatch_words: tuple[str, ...]
    #: every option the job gets (script lines, SBATCH_*, command line), sbatch's order
    directives: tuple[str, ...]
    additions: tuple[str, ...]
    #: the array's task ids, or None for a single job
    array: ArraySpec | None
    pool: SitePool
    forward: bool
    #: the hang watchdog's allowance for the script's output (None: not watched)
    max_idle: float | str | None
    parsable: bool
    quiet: bool
    wait: bool
    test_only: bool
    submit_dir: Path

    @property
    def name(self) -> str:
        """The job's name: ``--job-name`` wherever the user set it, else the script's."""
        found = None
        for d in self.directives:
            if canonical_option(d) == "--job-name":
                found = option_value(d)
        return found or self.source.name

    @property
    def indices(self) -> tuple[int, ...]:
        return self.array.indices if self.array is not None else (0,)


def plan(cmd: SearchCommand, cluster: ClusterConfig | SbatchSite, *, cwd: Path,
         environ: Mapping[str, str], stdin_text: str | None,
         max_array_size: int | Callable[[], int] = 1001) -> PlainJob:
    """What to submit (pure but for reading the script): refuses what cannot be
    honoured before anything is recorded. ``max_array_size``: Slurm's ``MaxArraySize``,
    or how to ask for it (``scontrol show config``: asked only for an array job)."""
    source = script_source(cmd, cwd, stdin_text)
    check_batch_script(source)
    options = submission_options(cmd, source.text, environ)
    directives = tuple(d for d, _ in options)
    last: dict[str, str] = {}
    for d in directives:
        last[canonical_option(d) or d] = option_value(d) or ""
    array = None
    if "--array" in last:
        limit = max_array_size if isinstance(max_array_size, int) else max_array_size()
        array = parse_array(last["--array"], limit)
    max_idle = max_idle_requested(cmd, source)
    requeue_words = [o for o in map(canonical_option, directives)
                     if o in ("--requeue", "--no-requeue")]
    if max_idle is not None and requeue_words[-1:] == ["--no-requeue"]:   # the later wins
        raise UsageError(f"{MAX_IDLE_OPTION} requeues a hung job, and this job says "
                         "--no-requeue (its #SBATCH lines, SBATCH_NO_REQUEUE or the command "
                         f"line): remove one of the two")
    pool = site_of(cluster).pool_for(last.get("--partition"))
    words: list[str] = []
    for o in cmd.options:
        canon = canonical_option(o)
        if canon in ("--wrap", "--quiet"):
            continue            # --wrap became the script; dethpc prints sbatch's line
        words.extend(o.split(" ", 1) if o.startswith("-") and not o.startswith("--")
                     and " " in o else [o])
    return PlainJob(source=source, args=tuple(cmd.args), sbatch_words=tuple(words),
                    directives=directives, additions=tuple(dethpc_directives(directives, pool)),
                    array=array, pool=pool, forward=forward_requested(cmd, source.text),
                    max_idle=max_idle,
                    parsable=cmd.parsable, quiet="--quiet" in last, wait="--wait" in last,
                    test_only="--test-only" in last, submit_dir=cwd)


# ------------------------------------------------------------------ the wrapper
def wrapper_script(job: PlainJob, *, experiment_id: int, paths: ExperimentPaths,
                   trials: Sequence[tuple[int, int]], python: str) -> str:
    """The script Slurm receives. ``trials``: (array task id, trial id)."""
    from dethpc.common.version import __version__
    from dethpc.jobs import wrapper_text

    patterns = [(str(i) if job.array is not None else '""', tid,
                 str(paths.trial(tid).root)) for i, tid in trials]
    # TEMPLATE's text without Jinja2 unless a site overrides it (byte-identical:
    # tests/unit/jobs/test_wrapper_text.py)
    return wrapper_text.render(
        version=__version__, experiment_id=experiment_id, script_name=job.source.name,
        header=header_of(job.source.text), additions=list(job.additions), tasks=patterns,
        script=str(paths.script), signal=job.pool.signal,
        signal_grace_s=job.pool.signal_grace_s, python=python, bin_dir=str(paths.bin),
        forward=job.forward, config=str(paths.config))


def wrapper_path(paths: ExperimentPaths, job: PlainJob) -> Path:
    """Named as the script, so that sbatch's default job name is the script's."""
    return paths.root / "sbatch" / job.source.name


def config_yaml(job: PlainJob) -> str:
    """The experiment config of a ``dethpc sbatch`` job: valid, minimal, honest (the
    ``single`` searcher, no length). A job's end is its trial's end (dethpc never
    submits it again); Slurm's own requeues after a failure (a node failure) count
    against ``max_restarts``, Determined's default of 5."""
    what = "an array job" if job.array is not None else "a job"
    cfg = {
        "name": job.name,
        "description": f"{what} submitted with `dethpc sbatch {job.source.name}` from "
                       f"{job.submit_dir}",
        "entrypoint": f"# run by Slurm: {job.source.name} {' '.join(job.args)}".rstrip(),
        "max_restarts": MAX_RESTARTS,
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True},
    }
    if job.max_idle is not None:
        # opted in: the script's output growing is its progress (docs/reliability.md)
        cfg["slurm"] = {"watchdog": {"max_idle_s": job.max_idle, "output": True}}
    text = block_yaml(cfg)
    if text is None:
        import yaml

        text = yaml.safe_dump(cfg, sort_keys=False)
    return text


def block_yaml(data: Mapping[str, object], indent: str = "") -> str | None:
    """``data`` (identifier keys; strings, whole numbers, finite floats, booleans and
    mappings of them) as block YAML whose strings are JSON's double-quoted scalars (a
    YAML double-quoted scalar is a superset): what PyYAML's safe loader reads back as
    ``data``, without importing YAML (~15 ms of ``dethpc sbatch``, issue 47). None when a
    value is anything else, or a string holds a character outside printable ASCII (the
    caller dumps with PyYAML)."""
    import json

    lines = []
    for key, value in data.items():
        if not key.isidentifier():
            return None
        if isinstance(value, Mapping):
            inner = block_yaml(value, indent + "  ")
            if not inner:          # None, or an empty mapping (read back as null)
                return None
            lines.append(f"{indent}{key}:\n{inner}")
        elif isinstance(value, bool):
            lines.append(f"{indent}{key}: {'true' if value else 'false'}\n")
        elif isinstance(value, int | float) and abs(value) < float("inf"):
            lines.append(f"{indent}{key}: {value!r}\n")
        elif isinstance(value, str) and all(" " <= c <= "~" for c in value):
            lines.append(f"{indent}{key}: {json.dumps(value)}\n")
        else:
            return None
    return "".join(lines)


# ------------------------------------------------------------------ records
@dataclass
class Recorded:
    """The rows ``record`` wrote and the run directory it filled."""

    experiment_id: int
    batch_id: int
    paths: ExperimentPaths
    #: (array task id, trial id)
    trials: list[tuple[int, int]] = field(default_factory=list)


def record(store: Store | SqliteAtHead, cluster: ClusterConfig | SbatchSite, job: PlainJob, *,
           token: str, owner: str, python: str) -> Recorded:
    """The experiment (kind SBATCH), its trials (one per task, no job wanted from the
    daemon) and a batch SUBMITTING; then its run directory: the config, the script's
    copy, the ``dethpc`` shim and the wrapper. ``store``: the ``Store``, or an SQLite file
    at head written with ``sqlite3`` alone (``dethpc.store.sbatch_rows``: the same rows)."""
    site = site_of(cluster)
    runs_root = Path(site.runs_root).expanduser()
    config = config_yaml(job)
    message = f"dethpc sbatch {job.source.name}: {len(job.indices)} trial(s)"
    if isinstance(store, SqliteAtHead):
        from dethpc.store import sbatch_rows

        made = sbatch_rows.insert(store, sbatch_rows.NewSbatch(
            NewExperiment(name=job.name, config_yaml=config, owner=owner, backend=site.backend,
                          kind=ExperimentKind.SBATCH.value,
                          description=f"dethpc sbatch {job.source.name}"),
            batch_name=MARKER + token, pool=job.pool.name,
            throttle=job.array.throttle if job.array else 0, indices=job.indices,
            event_kind=EventKind.CREATED.value, event_message=message),
            lambda exp_id: str(ExperimentPaths.new(runs_root, exp_id).root))
        rec = Recorded(made.experiment_id, made.batch_id,
                       ExperimentPaths.of(runs_root, made.experiment_id), made.trials)
    else:
        rec = _record_orm(store, site, job, config, message, MARKER + token, owner)
    paths = rec.paths
    try:
        make_run_dir(paths.root, site.runs_mode)
        paths.ensure()
        paths.config.write_text(config)
        paths.context.mkdir(parents=True, exist_ok=True)
        paths.script.write_text(job.source.text, encoding="utf-8", errors="surrogateescape")
        paths.script.chmod(0o700)
        for _, tid in rec.trials:
            paths.trial(tid).root.mkdir(parents=True, exist_ok=True)
        write_shim(paths, python)
        wrapper = wrapper_path(paths, job)
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(wrapper_script(job, experiment_id=rec.experiment_id, paths=paths,
                                          trials=rec.trials, python=python))
    except OSError as exc:
        unrecord(store, rec)
        raise DethpcError(f"cannot write the run directory {paths.root}: {exc}") from None
    return rec


def _record_orm(store: Store, site: SbatchSite, job: PlainJob, config: str, message: str,
                batch_name: str, owner: str) -> Recorded:
    """``record``'s rows through the models (any database)."""
    from dethpc.control.experiments import claim_run_dir
    from dethpc.store.models import Batch, BatchState, Event, Experiment, SearcherState, Trial

    with store.session() as s:
        exp = Experiment(name=job.name, config_yaml=config, run_dir="",
                         owner=owner, backend=site.backend, kind=ExperimentKind.SBATCH,
                         description=f"dethpc sbatch {job.source.name}")
        s.add(exp)
        s.flush()
        assert exp.id is not None
        paths = claim_run_dir(exp, Path(site.runs_root).expanduser())
        s.add(exp)
        s.add(SearcherState(experiment_id=exp.id, initialized=True, shutdown=True))
        batch = Batch(experiment_id=exp.id, name=batch_name, state=BatchState.SUBMITTING,
                      pool=job.pool.name, size=len(job.indices),
                      throttle=job.array.throttle if job.array else 0)
        s.add(batch)
        s.flush()
        assert batch.id is not None
        rec = Recorded(exp.id, batch.id, paths)
        for index in job.indices:
            trial = Trial(experiment_id=exp.id, request_id=index, needs_job=False)
            s.add(trial)
            s.flush()
            assert trial.id is not None
            rec.trials.append((index, trial.id))
        s.add(Event(experiment_id=exp.id, kind=EventKind.CREATED, message=message))
    return rec


def unrecord(store: Store | SqliteAtHead, rec: Recorded) -> None:
    """Remove every row and file of ``rec``: sbatch refused the job (or it was a test)."""
    if isinstance(store, SqliteAtHead):
        from dethpc.store import sbatch_rows

        sbatch_rows.remove(store, rec.experiment_id)
    else:
        from sqlmodel import select

        from dethpc.store.models import Batch, Event, Experiment, SearcherState, Trial

        with store.session() as s:
            for model in (Event, Trial, Batch, SearcherState):
                for row in s.exec(select(model).where(
                        model.experiment_id == rec.experiment_id)):  # type: ignore[attr-defined]
                    s.delete(row)
            s.flush()
            exp = s.get(Experiment, rec.experiment_id)
            if exp is not None:
                s.delete(exp)
    shutil.rmtree(rec.paths.root, ignore_errors=True)


class SubmitterLedger(SbatchLedger):
    """The submitting process's ledger: what sbatch refused leaves nothing behind (the
    user reads sbatch's own answer); the daemon's ``SbatchLedger`` ends a record whose
    submitter died without a job in ERROR instead."""

    def __init__(self, store: Store | SqliteAtHead, rec: Recorded, job: PlainJob,
                 batch_name: str) -> None:
        super().__init__(store, exp_id=rec.experiment_id, batch_id=rec.batch_id,
                         batch_name=batch_name, size=len(rec.trials), job_name=job.name)
        self.rec = rec

    def give_back(self) -> None:
        unrecord(self.store, self.rec)


class UserAnswers:
    """The refusal policy of a user's own sbatch: sbatch's refusal is the answer the user
    reads (its words and exit code), nothing waits and no budget is charged (the
    daemon's ``SubmitBudget`` plans the daemon's own submissions)."""

    def refusal(self, exp_id: int, size: int, exc: SubmitLimitError) -> None:
        return None

    def succeeded(self) -> None:
        return None


# ------------------------------------------------------------------ sbatch
def sbatch_words(job: PlainJob, wrapper: Path, key: str = "") -> list[str]:
    """The real sbatch's words; a script that came on standard input goes there again
    (sbatch treats it differently: no ``SLURM_JOB_NAME`` in the job). ``key``: the
    ``--comment`` adoption finds the job by, added unless the user set a comment
    (theirs reaches Slurm unchanged)."""
    own = ["--parsable"]
    if key and not any(canonical_option(d) == "--comment" for d in job.directives):
        own.append(f"--comment={key}")
    if job.source.from_stdin:
        return [*own, *job.sbatch_words]
    return [*own, *job.sbatch_words, str(wrapper), *job.args]


def job_id_of(stdout: str) -> tuple[str, str | None]:
    """``N`` or ``N;cluster`` (sbatch ``--parsable``) -> (N, cluster)."""
    line = stdout.strip().splitlines()[0] if stdout.strip() else ""
    jid, _, cluster = line.partition(";")
    if not jid.isdigit():
        raise DethpcError(f"sbatch answered {stdout.strip()!r}; expected a job id")
    return jid, cluster or None


def announce(job: PlainJob, job_id: str, cluster: str | None) -> str:
    """What sbatch itself prints for the job (nothing under ``--quiet``)."""
    if job.quiet:
        return ""
    if job.parsable:
        return f"{job_id};{cluster}" if cluster else job_id
    return f"Submitted batch job {job_id}" + (f" on cluster {cluster}" if cluster else "")


@dataclass(frozen=True)
class Outcome:
    """What to print and the exit code (sbatch's), and the experiment recorded."""

    stdout: str
    stderr: str
    code: int
    experiment_id: int | None = None


def submit(store: Store | SqliteAtHead, cluster: ClusterConfig | SbatchSite, job: PlainJob,
           runner: CommandRunner, *, owner: str, python: str | None = None) -> Outcome:
    """Record, run the real sbatch in the user's directory and environment, confirm or
    remove the records (the one submission protocol, ``dethpc.control.submission.send``,
    under the submitter's lock); returns what to print and the exit code (sbatch's).
    Killed or failed after the record (sbatch timed out, say), the record is left for
    the daemon, which adopts the job by its ``--comment`` once the lock is free."""
    site = site_of(cluster)
    python = python or site.python or sys.executable
    answer: list[CommandResult] = []
    with submitting(Path(site.runs_root)) as token:
        rec = record(store, site, job, token=token, owner=owner, python=python)
        ledger = SubmitterLedger(store, rec, job, MARKER + token)
        wrapper = wrapper_path(rec.paths, job)

        def sbatch() -> list[str]:
            res = run_sbatch(runner, sbatch_words(job, wrapper, ledger.comment),
                             input=wrapper.read_text() if job.source.from_stdin else None,
                             timeout=10 * 86400 if job.wait else None)
            answer.append(res)
            if res.returncode != 0 and not job.wait or job.test_only or not res.stdout.strip():
                return []          # no job: sbatch's answer is the user's
            jid, _ = job_id_of(res.stdout)
            return [str(JobRef(jid).task_ref(i if job.array is not None else None))
                    for i in job.indices]

        try:
            refs = send(ledger, UserAnswers(), sbatch)
        except CommandError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):   # sbatch never started
                unrecord(store, rec)
            raise
    (res,) = answer
    if not refs:
        return Outcome(res.stdout, res.stderr, res.returncode)
    jid, on = job_id_of(res.stdout)
    line = announce(job, jid, on)
    return Outcome(line + "\n" if line else "", res.stderr, res.returncode, rec.experiment_id)


def passthrough(argv: Sequence[str], runner: CommandRunner) -> Outcome:
    """``--help``, ``--usage``, ``--version``: sbatch's own answer."""
    res = run_sbatch(runner, argv)
    return Outcome(res.stdout, res.stderr, res.returncode)


def wants_info(argv: Sequence[str]) -> bool:
    head = []
    for a in argv:
        if not a.startswith("-"):
            break
        head.append(a)
    return any(canonical_option(a) in INFO_OPTIONS or a in INFO_SHORT for a in head)

