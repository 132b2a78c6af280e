"""Pure parsing and formatting of what the Slurm CLI prints and accepts.

Owns (job ids and array specs are ``dethpc.common.jobref``'s): the table from every
Slurm job state (long names and squeue's abbreviations) to ``JobState``, the
``squeue``/``sacct``/``sinfo`` output formats dethpc asks for and their parsers,
``ExitCode`` ("2:0"), ``scontrol show config`` and version strings, the
accounting backlog ``sdiag`` reports, GRES GPU counts and Slurm time strings.
Must not: run commands, log, or touch files. Every function here is a pure
function of its arguments, tested by tables in tests/unit/backends/test_slurm_parse.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dethpc.backends.base import JobInfo, JobState
from dethpc.common.jobref import base_job_id, canonical_ref, parse_job_id
from dethpc.common.sbatch_options import getopt_complaint, parse_time

# ----------------------------------------------------------------------- states
#: Every Slurm job state (long name and squeue's compact code) -> dethpc state.
STATE_TABLE: dict[str, JobState] = {
    # waiting to run (requeued and held jobs wait too)
    "PENDING": JobState.PENDING, "PD": JobState.PENDING,
    "CONFIGURING": JobState.PENDING, "CF": JobState.PENDING,
    "REQUEUED": JobState.PENDING, "RQ": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "RH": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING, "RF": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING, "RD": JobState.PENDING,
    # running (or finishing up on the nodes)
    "RUNNING": JobState.RUNNING, "R": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING, "CG": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "SO": JobState.RUNNING,
    "RESIZING": JobState.RUNNING, "RS": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "SI": JobState.RUNNING,
    # paused
    "SUSPENDED": JobState.SUSPENDED, "S": JobState.SUSPENDED,
    "STOPPED": JobState.SUSPENDED, "ST": JobState.SUSPENDED,
    # ended
    "COMPLETED": JobState.COMPLETED, "CD": JobState.COMPLETED,
    "FAILED": JobState.FAILED, "F": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED, "BF": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED, "SE": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED, "CA": JobState.CANCELLED,
    "DEADLINE": JobState.CANCELLED, "DL": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED, "RV": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT, "TO": JobState.TIMEOUT,
    "PREEMPTED": JobState.PREEMPTED, "PR": JobState.PREEMPTED,
    "NODE_FAIL": JobState.NODE_FAIL, "NF": JobState.NODE_FAIL,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY, "OOM": JobState.OUT_OF_MEMORY,
}


def map_state(raw: str) -> JobState:
    """Slurm state word -> ``JobState``; tolerates "CANCELLED by 0", "CANCELLED+",
    case and blanks. Anything unknown is ``UNKNOWN``."""
    state = STATE_TABLE.get(raw)   # squeue's and sacct's own word, as it is
    if state is not None:
        return state
    word = raw.strip().split(" ", 1)[0].rstrip("+").upper()
    return STATE_TABLE.get(word, JobState.UNKNOWN)


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """sacct ``ExitCode`` "2:0" -> (exit code, signal); "0:15" -> (0, 15).

    A signal of 0 is reported as ``None``; an empty or malformed field gives
    ``(None, None)``.
    """
    parts = text.strip().split(":")
    try:
        code = int(parts[0])
        sig = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    except ValueError:
        return None, None
    return code, (sig or None)


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` prints "123" or "123;cluster": return the job id."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch --parsable printed no job id: {stdout!r}")
    return job_id


_REFUSAL_PREFIXES = ("sbatch: error: ", "sbatch: fatal: ", "allocation failure: ",
                     "Batch job submission failed: ", "sbatch: ")
#: the hint sbatch prints after getopt's complaint: noise for someone who ran dethpc
_HELP_HINT = 'try "sbatch --help"'


def sbatch_refusal(stderr: str) -> str:
    """Slurm's words from a refused ``sbatch`` (``--test-only`` or not): each line
    without its ``sbatch: error:``/``allocation failure:`` prefix, repeats dropped,
    joined with '; '. getopt's complaint about an option keeps its ``sbatch:`` (those
    are sbatch's exact words) and the "Try sbatch --help" hint after it is dropped."""
    words: list[str] = []
    for line in stderr.splitlines():
        text = raw = line.strip()
        stripped = True
        while stripped:
            stripped = False
            for prefix in _REFUSAL_PREFIXES:
                if text.startswith(prefix):
                    text, stripped = text[len(prefix):].strip(), True
        if text.lower().startswith(_HELP_HINT):
            continue
        if getopt_complaint(text) and raw == f"sbatch: {text}":
            text = raw
        if text and text.lower() not in (w.lower() for w in words):
            words.append(text)
    return "; ".join(words) or "sbatch refused the job without a message"


# --------------------------------------------------------------- squeue / sacct
#: squeue -O fields: ``:0`` means "no padding, no truncation", ``|`` is the suffix
#: (the delimiter). exit_code is the raw wait status (256 = exit 1). The comment
#: goes last so that a '|' inside it cannot shift the other fields.
#: QOS and Account: per-user limits count a user's jobs per QoS and per association.
SQUEUE_FIELDS = ("JobArrayID:0|,State:0|,exit_code:0|,RestartCnt:0|,Reason:0|,"
                 "NodeList:0|,QOS:0|,Account:0|,Name:0|,Comment:0")
#: sacct -o fields (with -P the delimiter is '|'); Comment last for the same reason.
SACCT_FIELDS = "JobID,State,ExitCode,Reason,NodeList,JobName,Comment"


def _clean(value: str) -> str:
    v = value.strip()
    return "" if v in ("(null)", "None", "N/A") else v


def parse_wait_status(text: str) -> tuple[int | None, int | None]:
    """squeue ``exit_code`` -> (exit code, signal). Slurm 22.05 prints the wait status
    ("512" -> (2, None), "9" -> (0, 9)); 25.11 prints "code:signal" as sacct does
    ("2:0", "0:9"; tests/golden/slurm). Empty or "N/A" -> (None, None)."""
    t = text.strip()
    if ":" in t:
        return parse_exit_code(t)
    if not t.isdigit():
        return None, None
    status = int(t)
    return status >> 8, (status & 0x7F) or None


def _int_or_zero(text: str) -> int:
    t = text.strip()
    return int(t) if t.isdigit() else 0


def parse_squeue(text: str) -> list[JobInfo]:
    """Parse ``squeue -h -r -O SQUEUE_FIELDS`` output; one JobInfo per task.

    Lines whose id is a bracket form (when ``-r`` was not honoured) expand to
    one JobInfo per index. The exit code is only reported for ended jobs
    (squeue lists them for MinJobAge with ``--states=all``). Malformed lines
    are skipped.
    """
    out: list[JobInfo] = []
    for line in text.splitlines():
        fields = line.split("|", 9)
        if len(fields) < 10:
            continue
        jid, state, status, restarts, reason, nodes, qos, account, name, comment = fields
        one = canonical_ref(jid)   # a task or job as it is, without the id grammar
        try:
            refs = [one] if one is not None else parse_job_id(jid).refs()
        except ValueError:
            continue
        st = map_state(state)
        code, sig = parse_wait_status(status) if st.is_terminal else (None, None)
        for ref in refs:
            out.append(JobInfo(
                ref=ref, state=st, raw_state=state.strip(), exit_code=code, signal=sig,
                reason=_clean(reason), restart_count=_int_or_zero(restarts),
                nodes=_clean(nodes), name=name.strip(), comment=_clean(comment),
                qos=_clean(qos), account=_clean(account),
            ))
    return out


def parse_sacct(text: str) -> list[JobInfo]:
    """Parse ``sacct -P -n -X -o SACCT_FIELDS`` output.

    When one job id appears several times (requeues with ``--duplicates``),
    the last line wins. Bracket ids (a pending array cancelled as a whole)
    expand to one JobInfo per index. Step lines (``123.batch``) are skipped.
    """
    by_ref: dict[str, JobInfo] = {}
    for line in text.splitlines():
        fields = line.split("|", 6)
        if len(fields) < 7:
            continue
        jid, state, exit_s, reason, nodes, name, comment = fields
        try:
            parsed = parse_job_id(jid)
        except ValueError:
            continue
        if parsed.step is not None:
            continue
        code, sig = parse_exit_code(exit_s)
        for ref in parsed.refs():
            by_ref[ref] = JobInfo(
                ref=ref, state=map_state(state), raw_state=state.strip(),
                exit_code=code, signal=sig, reason=_clean(reason),
                nodes=_clean(nodes), name=name.strip(), comment=_clean(comment),
            )
    return list(by_ref.values())


# ------------------------------------------------------------- scontrol / sinfo
def parse_key_values(text: str) -> dict[str, str]:
    """``scontrol show config`` ("Key  = value" lines) -> dict. Lines without
    " = " (headers, blank lines) are skipped; the first occurrence of a key wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or " " in key.strip():
            continue
        out.setdefault(key.strip(), value.strip())
    return out


def parse_version(text: str) -> tuple[int, int] | None:
    """"slurm 22.05.8" (``scontrol --version``) -> (22, 5); None when absent."""
    m = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    return (int(m[1]), int(m[2])) if m else None


def parse_dbd_backlog(sdiag: str) -> int | None:
    """``DBD Agent queue size: 3`` in ``sdiag`` output -> 3: accounting records slurmctld
    holds because slurmdbd is down or has not taken them yet (``sacct`` lacks them).
    None when the line is absent."""
    m = re.search(r"^\s*DBD Agent queue size:\s*(\d+)\s*$", sdiag, re.MULTILINE)
    return int(m[1]) if m else None


def nodes_registering(sinfo_states: str) -> bool:
    """True when a node's state (``sinfo -h -N -o %T``, one per line) is UNKNOWN: the
    controller has not heard from its slurmd since it started."""
    return any(line.strip().rstrip("*~#!%$@^-+").lower() == "unknown"
               for line in sinfo_states.splitlines())


def parse_gres_gpus(gres: str) -> int:
    """GPUs per node from a sinfo ``%G`` value: "gpu:a100:4(S:0-1),mps:100" -> 4."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres.strip()):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if not parts or parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        if count.isdigit() and len(parts) >= 2:
            total += int(count)
        elif len(parts) == 2:  # "gpu:a100" without count means one
            total += 1
    return total


#: sinfo -o fields: partition, node count, CPUs per node, GRES, time limit.
SINFO_FORMAT = "%R|%D|%c|%G|%l"


@dataclass(frozen=True)
class NodeGroup:
    """One sinfo line: ``count`` nodes of a partition sharing CPUs and GRES."""

    count: int
    cpus: int
    gpus: int


@dataclass(frozen=True)
class Partition:
    name: str
    groups: tuple[NodeGroup, ...]
    time_limit_s: int | None

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    def nodes_fitting(self, cpus: int, gpus: int) -> int:
        """How many nodes offer at least ``cpus`` CPUs and ``gpus`` GPUs each."""
        return sum(g.count for g in self.groups if g.cpus >= cpus and g.gpus >= gpus)


def _int_prefix(text: str) -> int:
    m = re.match(r"\d+", text.strip())
    return int(m[0]) if m else 0


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Parse ``sinfo -h -o SINFO_FORMAT`` lines into partitions (groups merged)."""
    groups: dict[str, list[NodeGroup]] = {}
    limits: dict[str, int | None] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 5:
            continue
        name, count, cpus, gres, limit = (f.strip() for f in fields[:5])
        groups.setdefault(name, []).append(
            NodeGroup(_int_prefix(count), _int_prefix(cpus), parse_gres_gpus(gres)))
        try:
            limits[name] = parse_time(limit)
        except ValueError:
            limits[name] = None
    return {n: Partition(n, tuple(g), limits[n]) for n, g in groups.items()}


def unique_bases(refs: Sequence[str]) -> list[str]:
    """Unique base job ids of ``refs``, in first-seen order."""
    seen: dict[str, None] = {}
    for ref in refs:
        seen.setdefault(base_job_id(ref), None)
    return list(seen)
