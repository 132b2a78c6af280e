"""sbatch's own option syntax, and which options dethpc manages: pure facts of Slurm.

Owns: sbatch's option vocabulary (long options, short forms, getopt prefixes:
``canonical_option``, ``option_value``), the options dethpc manages itself
(``MANAGED_SBATCH_OPTIONS``, ``managed_option``) and the check of a site's or user's
``sbatch_args`` against them (``check_args``), getopt's complaints about an option as
sbatch prints them and the item that spelled it (``complained_option``,
``spells_option``), the layering of ``sbatch_args`` over
defaults (``layer``, rule below), sbatch's own refusals of a directive list
(``sbatch_conflicts``, for checks and tests), a script's ``#SBATCH`` lines as sbatch
reads them (``script_header``) and the number of tasks a job's options ask for
(``task_count``, what the local backend counts against its slots).
Must not: build a job's directives (``dethpc.jobs.directives`` does), run commands or
read files. Lives in ``common`` because the config checker, the local backend, job
building and ``dethpc sbatch`` all read sbatch's syntax the same way.

The layering rule (docs/config.md): dethpc's defaults, then the pool's
``sbatch_args``, then the experiment's ``slurm.sbatch_args``. An argument that sets
an option already present replaces it in place (sbatch would take the last one
anyway, or refuse the pair: ``--mem`` and ``--mem-per-cpu`` are one kind, so are
every GPU request and ``--cpus-per-task``/``--cpus-per-gpu``); ``!--option`` drops
it. So every option appears at most once.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: sbatch 22.05's long options (``sbatch --help``); getopt accepts unique prefixes
SBATCH_LONG_OPTIONS: tuple[str, ...] = tuple(f"--{o}" for o in (
    "account array bb bbf begin chdir cluster-constraint clusters comment constraint "
    "container contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task "
    "deadline delay-boot dependency distribution error exclude exclusive export export-file "
    "extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket "
    "gpus-per-task gres gres-flags help hold ignore-pbs input job-name kill-on-invalid-dep "
    "licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus "
    "network nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core "
    "ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output overcommit "
    "oversubscribe parsable partition power priority profile propagate qos quiet reboot "
    "requeue reservation signal sockets-per-node spread-job switches test-only thread-spec "
    "threads-per-core time time-min tmp uid usage use-min-nodes verbose version wait "
    "wait-all-nodes wckey wrap").split())

#: sbatch's short options and the long option each stands for
SBATCH_SHORT_OPTIONS: dict[str, str] = {
    "-a": "--array", "-A": "--account", "-b": "--begin", "-c": "--cpus-per-task",
    "-C": "--constraint", "-d": "--dependency", "-D": "--chdir", "-e": "--error",
    "-F": "--nodefile", "-G": "--gpus", "-H": "--hold", "-i": "--input", "-J": "--job-name",
    "-k": "--no-kill", "-L": "--licenses", "-m": "--distribution", "-M": "--clusters",
    "-n": "--ntasks", "-N": "--nodes", "-o": "--output", "-O": "--overcommit",
    "-p": "--partition", "-q": "--qos", "-Q": "--quiet", "-s": "--oversubscribe",
    "-S": "--core-spec", "-t": "--time", "-W": "--wait", "-w": "--nodelist",
    "-x": "--exclude",
}
#: sbatch long options that never take a value (sbatch 22.05 ``--help``)
SBATCH_FLAGS: frozenset[str] = frozenset(f"--{o}" for o in (
    "contiguous hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot "
    "requeue spread-job test-only usage use-min-nodes verbose version wait help").split())
#: long options whose value is optional (only ``--opt=value`` gives one)
SBATCH_OPTIONAL_VALUE = frozenset({"--exclusive", "--no-kill", "--get-user-env", "--propagate"})
#: short options that never take a value
SBATCH_SHORT_FLAGS = frozenset({"-H", "-k", "-O", "-Q", "-s", "-v", "-W", "-h", "-V", "-I"})

#: sbatch options dethpc sets itself, with the reason a user may not set them
MANAGED_SBATCH_OPTIONS: dict[str, str] = {
    "--array": "dethpc submits trials as one array job itself",
    "--output": "dethpc writes job output to the trial directory, appended across requeues",
    "--error": "dethpc writes job output to the trial directory, appended across requeues",
    "--open-mode": "dethpc appends job output across requeues",
    "--job-name": "dethpc names jobs so it can find them again after a restart",
    "--comment": "dethpc tags jobs with their experiment and trial",
    "--requeue": "dethpc's preemption handling sets it",
    "--no-requeue": "dethpc's preemption handling relies on requeue",
    "--signal": "dethpc's preemption handling sets it from the pool's signal and "
                "signal_grace_s in the cluster config",
    "--parsable": "dethpc parses sbatch output itself",
    "--wrap": "dethpc submits a rendered script",
    "--test-only": "dethpc runs sbatch --test-only itself at submit",
}

#: the prefix of an ``sbatch_args`` item that drops dethpc's directive of that option
DROP = "!"


class Kind(enum.Enum):
    """Options sbatch treats as one request: a later one replaces an earlier one here
    (sbatch refuses the memory trio and the two cpus options together)."""

    MEMORY = "memory"
    GPUS = "gpus"
    CPUS = "cpus"


_KIND_OF: dict[str, Kind] = {
    "--mem": Kind.MEMORY, "--mem-per-cpu": Kind.MEMORY, "--mem-per-gpu": Kind.MEMORY,
    "--gpus": Kind.GPUS, "--gpus-per-node": Kind.GPUS, "--gpus-per-task": Kind.GPUS,
    "--gpus-per-socket": Kind.GPUS,
    "--cpus-per-task": Kind.CPUS, "--cpus-per-gpu": Kind.CPUS,
}


#: getopt's complaints about an option (glibc's words, which sbatch prints after its own
#: name for a command-line or ``#SBATCH`` option: "sbatch: unrecognized option '--x'")
GETOPT_COMPLAINTS = ("unrecognized option", "invalid option", "requires an argument",
                     "is ambiguous", "doesn't allow an argument")
_SHORT_NAMED = re.compile(r"-- '(.)'")
_LONG_NAMED = re.compile(r"'(--?[^'=\s]+)")


def getopt_complaint(text: str) -> bool:
    """Whether ``text`` is getopt's complaint about an option."""
    low = text.lower()
    return any(c in low for c in GETOPT_COMPLAINTS)


def complained_option(text: str) -> str | None:
    """The option getopt's complaint names: ``'--x'`` and ``'--x=v'`` -> ``--x``,
    ``-- 'Z'`` -> ``-Z``; None when ``text`` is no such complaint or names none."""
    if not getopt_complaint(text):
        return None
    short = _SHORT_NAMED.search(text)
    if short:
        return f"-{short[1]}"
    named = _LONG_NAMED.search(text)
    return named[1] if named else None


def spells_option(arg: str, option: str) -> bool:
    """Whether the ``sbatch_args`` item ``arg`` is written with ``option`` (as named by
    ``complained_option``): ``--x = v`` and ``--x=v`` spell ``--x``; ``-Zv`` spells ``-Z``."""
    body = arg.strip().removeprefix(DROP)
    if option.startswith("--"):
        head = body.split("=", 1)[0].split()
        return bool(head) and head[0] == option
    return body.startswith(option) and not body.startswith("--")


def canonical_option(arg: str) -> str | None:
    """The long option ``arg`` sets (``-plow`` -> ``--partition``, ``--part=x`` ->
    ``--partition``), or None when sbatch does not know it or the prefix is ambiguous."""
    text = arg.strip()
    if text.startswith("--"):
        name = text.split("=", 1)[0].split(None, 1)[0]
        if len(name) <= 2:
            return None
        if name in SBATCH_LONG_OPTIONS:
            return name
        matches = [o for o in SBATCH_LONG_OPTIONS if o.startswith(name)]
        return matches[0] if len(matches) == 1 else None
    if text.startswith("-") and len(text) >= 2:
        return SBATCH_SHORT_OPTIONS.get(text[:2])
    return None


def managed_option(arg: str) -> str | None:
    """The managed option that ``arg`` sets, or None (prefixes and short forms count:
    sbatch would accept ``--out=x`` or ``-ofile`` for ``--output``)."""
    text = arg.strip()
    if text.startswith("--"):
        name = text.split("=", 1)[0].split(None, 1)[0]
        if len(name) > 2:
            # a prefix of a managed option counts even when sbatch finds it ambiguous
            hits = [o for o in MANAGED_SBATCH_OPTIONS if o.startswith(name)]
            if hits:
                return hits[0]
    option = canonical_option(text)
    return option if option in MANAGED_SBATCH_OPTIONS else None


def option_value(arg: str) -> str | None:
    """The value of ``--opt=v``, ``--opt v``, ``-o v`` or ``-ov``; None for a flag."""
    text = arg.strip()
    if text.startswith("--"):
        for sep in ("=", " "):
            if sep in text:
                return text.split(sep, 1)[1].strip()
        return None
    rest = text[2:].strip()
    return rest or None


def _identity(arg: str) -> Kind | str | None:
    """What an argument is the same request as: its kind, else its option."""
    option = canonical_option(arg)
    if option is None:
        return None
    if option == "--gres":
        value = (option_value(arg) or "").split(",")
        # --gres=gpu... is a GPU request; other generic resources stay an option of their own
        if len(value) == 1 and value[0].split(":", 1)[0] == "gpu":
            return Kind.GPUS
    return _KIND_OF.get(option, option)


@dataclass(frozen=True)
class ArgProblem:
    """Why an ``sbatch_args`` item is refused (``message`` says what is allowed)."""

    index: int
    message: str


def check_args(args: Sequence[str]) -> list[ArgProblem]:
    """Problems of a list of ``sbatch_args`` items (pure; the config checkers use it)."""
    problems: list[ArgProblem] = []
    for i, arg in enumerate(args):
        if "\n" in arg or "\r" in arg:
            problems.append(ArgProblem(i, f"an sbatch option may not contain a line break, "
                                          f"got {arg!r}"))
            continue
        drop = arg.startswith(DROP)
        body = arg[len(DROP):] if drop else arg
        if not body.startswith("-"):
            problems.append(ArgProblem(i, f"expected an sbatch option starting with '-', "
                                          f"got {arg!r} ('{DROP}--option' drops one of "
                                          "dethpc's directives)"))
            continue
        managed = managed_option(body)
        if managed is not None:
            problems.append(ArgProblem(i, f"{arg!r} is not allowed: {managed} is managed by "
                                          f"dethpc; {MANAGED_SBATCH_OPTIONS[managed]}"))
            continue
        if drop and canonical_option(body) is None:
            problems.append(ArgProblem(i, f"{arg!r} drops no sbatch option: "
                                          f"{body.split('=', 1)[0]!r} is not one (or an "
                                          f"ambiguous prefix)"))
        elif drop and option_value(body) is not None:
            problems.append(ArgProblem(i, f"{arg!r}: a drop names the option only, "
                                          f"e.g. '{DROP}{canonical_option(body)}'"))
    return problems


def layer(defaults: Sequence[str], *layers: Iterable[str]) -> list[str]:
    """``defaults`` with each layer applied in order (see the module docstring)."""
    out: list[tuple[Kind | str | None, str]] = [(_identity(d), d) for d in defaults]
    for args in layers:
        for arg in args:
            drop = arg.startswith(DROP)
            body = arg[len(DROP):] if drop else arg
            ident = _identity(body)
            same = [i for i, (k, _) in enumerate(out) if ident is not None and k == ident]
            if drop:
                out = [entry for i, entry in enumerate(out) if i not in same]
                continue
            if same:
                out[same[0]] = (ident, body)
                out = [entry for i, entry in enumerate(out) if i not in same[1:]]
            else:
                out.append((ident, body))
    return [text for _, text in out]


def sbatch_conflicts(directives: Sequence[str]) -> list[str]:
    """What sbatch would refuse or silently override in one job's (or one het
    component's) directives: an option given twice, two of a kind (``--mem`` with
    ``--mem-per-cpu``), a line break, a managed option set twice."""
    problems: list[str] = []
    seen: dict[Kind | str, str] = {}
    for d in directives:
        if d == "hetjob":
            seen = {}
            continue
        if "\n" in d or "\r" in d:
            problems.append(f"{d!r} contains a line break")
        ident = _identity(d)
        if ident is None:
            continue
        if ident in seen:
            problems.append(f"{seen[ident]!r} and {d!r} set the same request")
        seen[ident] = d
    return problems


def _count(value: str | None) -> int | None:
    """The first whole number of ``2``, ``2-4`` (a range: its minimum) or ``1,4,8``
    (a size list); None when there is none (sbatch refuses such a value itself)."""
    head = (value or "").replace(",", "-").split("-", 1)[0].strip()
    return int(head) if head.isdigit() and int(head) > 0 else None


def task_count(options: Sequence[str]) -> int:
    """How many tasks sbatch gives a job with these options, in the order sbatch reads
    them (the script's ``#SBATCH`` lines, then the command line; the last of each option
    wins): ``--ntasks``; else ``--nodes`` x ``--ntasks-per-node``; else one per node. A
    heterogeneous job (components split by ``hetjob``) has the sum of its components'."""
    total = 0
    ntasks = nodes = per_node = None
    for arg in [*options, "hetjob"]:
        if arg.strip() == "hetjob":
            total += ntasks if ntasks is not None else (nodes or 1) * (per_node or 1)
            ntasks = nodes = per_node = None
            continue
        match canonical_option(arg):
            case "--ntasks":
                ntasks = _count(option_value(arg))
            case "--nodes":
                nodes = _count(option_value(arg))
            case "--ntasks-per-node":
                per_node = _count(option_value(arg))
    return total



def script_header(text: str) -> list[tuple[str, str]]:
    """The script's ``#SBATCH`` options with their line numbers, as sbatch reads them:
    from the top, until the first line that is neither a comment nor blank; the words
    of one line split as a shell would (sbatch honours quotes there)."""
    out: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        rest = stripped[len("#SBATCH"):]
        if rest and not rest[0].isspace():
            continue                      # '#SBATCHX' is a comment
        words = shlex.split(rest, comments=True)
        j = 0
        while j < len(words):
            word = words[j]
            takes = (word.startswith("--") and "=" not in word
                     and canonical_option(word) not in SBATCH_FLAGS | SBATCH_OPTIONAL_VALUE
                     ) or (word[:2] in SBATCH_SHORT_OPTIONS and len(word) == 2)
            if takes and j + 1 < len(words):
                sep = "=" if word.startswith("--") else " "
                out.append((f"{word}{sep}{words[j + 1]}", f"script line {number}"))
                j += 2
            else:
                out.append((word, f"script line {number}"))
                j += 1
    return out


# ----------------------------------------------------------------- time limits
_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")
#: what Slurm prints, and sbatch takes, for no limit
NO_TIME_LIMIT = ("", "INFINITE", "UNLIMITED", "N/A", "NONE")


def parse_time(value: str | None) -> int | None:
    """Slurm's time syntax (sbatch ``--time``, and what ``sinfo``/``scontrol`` print) ->
    seconds; None for no limit. "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S".
    Raises ``ValueError`` for anything else."""
    text = "" if value is None else str(value).strip()
    if text.upper() in NO_TIME_LIMIT:
        return None
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"not in Slurm's time syntax: {value!r}")
    d, b, c = (int(x) if x is not None else None for x in m.group("d", "b", "c"))
    a = int(m.group("a"))
    if d is not None:  # D-HH[:MM[:SS]]
        return d * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if b is None:      # MM
        return a * 60
    if c is None:      # MM:SS
        return a * 60 + b
    return a * 3600 + b * 60 + c  # HH:MM:SS
