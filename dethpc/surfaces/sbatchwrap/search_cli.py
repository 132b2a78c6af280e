"""``dethpc sbatch --search search.yaml [sbatch options] script.sh [args...]``: the command.

Owns: splitting the command line into dethpc's own options (``--search``,
``--parsable``, ``--config key=value``), the sbatch options before the script and the
script's arguments; reading the ``SBATCH_*`` variables as sbatch would (the script's
``#SBATCH`` lines: ``dethpc.common.sbatch_options.script_header``); calling
``search.submit_search`` and printing its line.
Interim: ``dethpc sbatch`` without ``--search`` (issue 13 item 1) and a shared
argv/``#SBATCH`` parser belong to ``dethpc.surfaces.sbatchwrap.options``; once it lands, this
module should take its parsed options instead of ``parse_command``/``script_header``.
Must not: decide anything about the search (``search`` does) or submit jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.common.sbatch_options import (
    SBATCH_FLAGS,
    SBATCH_OPTIONAL_VALUE,
    SBATCH_SHORT_FLAGS,
    SBATCH_SHORT_OPTIONS,
    canonical_option,
    script_header,
)

#: sbatch's input environment variables and the option each stands for (man sbatch,
#: INPUT ENVIRONMENT VARIABLES; a command-line option beats them, they beat #SBATCH)
SBATCH_ENV = {
    "SBATCH_ACCOUNT": "--account", "SBATCH_ARRAY_INX": "--array",
    "SBATCH_CLUSTERS": "--clusters", "SBATCH_CONSTRAINT": "--constraint",
    "SBATCH_CONTAINER": "--container", "SBATCH_CORE_SPEC": "--core-spec",
    "SBATCH_CPUS_PER_GPU": "--cpus-per-gpu", "SBATCH_DISTRIBUTION": "--distribution",
    "SBATCH_EXCLUSIVE": "--exclusive", "SBATCH_EXPORT": "--export",
    "SBATCH_GPUS": "--gpus", "SBATCH_GPUS_PER_NODE": "--gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "--gpus-per-task", "SBATCH_GRES": "--gres",
    "SBATCH_HINT": "--hint", "SBATCH_JOB_NAME": "--job-name",
    "SBATCH_MEM_PER_CPU": "--mem-per-cpu", "SBATCH_MEM_PER_GPU": "--mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "--mem", "SBATCH_NETWORK": "--network",
    "SBATCH_NO_KILL": "--no-kill", "SBATCH_NO_REQUEUE": "--no-requeue",
    "SBATCH_OPEN_MODE": "--open-mode", "SBATCH_OVERCOMMIT": "--overcommit",
    "SBATCH_PARTITION": "--partition", "SBATCH_POWER": "--power",
    "SBATCH_PROFILE": "--profile", "SBATCH_QOS": "--qos", "SBATCH_REQUEUE": "--requeue",
    "SBATCH_RESERVATION": "--reservation", "SBATCH_SIGNAL": "--signal",
    "SBATCH_TIMELIMIT": "--time", "SBATCH_WAIT": "--wait", "SBATCH_WCKEY": "--wckey",
}
_ENV_FLAGS = frozenset({"--no-requeue", "--requeue", "--overcommit", "--wait"})


@dataclass
class SearchCommand:
    """A ``dethpc sbatch`` command line: dethpc's own options, then sbatch's words."""

    search_file: Path | None = None
    parsable: bool = False
    #: ``--forward-signal``: the early signal reaches the script too (plain mode only)
    forward_signal: bool = False
    #: ``--max-idle auto|SECONDS``: the hang watchdog watches the script's output
    #: (plain mode only; a search sets ``slurm.watchdog`` in its file)
    max_idle: str | None = None
    overrides: list[str] = field(default_factory=list)
    #: the sbatch options of the command line, one ``#SBATCH`` argument each
    options: list[str] = field(default_factory=list)
    script: Path | None = None
    args: list[str] = field(default_factory=list)


#: ``dethpc sbatch --max-idle auto|SECONDS`` (or ``#DETHPC --max-idle ...``)
MAX_IDLE_OPTION = "--max-idle"
#: dethpc's own options before the script that take a value (``=VALUE`` or the next word)
VALUE_OPTIONS = ("--search", "--config", MAX_IDLE_OPTION)


class UsageError(DethpcError):
    exit_code = 2


def parse_command(argv: Sequence[str]) -> SearchCommand:
    """``[dethpc and sbatch options] script [args...]``: as sbatch, the first word
    that is not an option or an option's value is the script; the rest are its."""
    cmd = SearchCommand()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "-":
            cmd.script, cmd.args = Path(arg), list(argv[i + 1:])
            return cmd
        name, eq, value = arg.partition("=")
        if name in VALUE_OPTIONS:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                i, value = i + 1, argv[i + 1]
            if name == "--search":
                cmd.search_file = Path(value)
            elif name == MAX_IDLE_OPTION:
                cmd.max_idle = value
            else:
                cmd.overrides.append(value)
        elif arg == "--forward-signal":
            cmd.forward_signal = True
        elif canonical_option(arg) == "--parsable":
            cmd.parsable = True
        elif arg.startswith("--"):
            option = canonical_option(arg)
            if option is None:
                raise UsageError(f"unknown sbatch option {arg!r} (sbatch 22.05's long options "
                                 "and their unique prefixes are accepted)")
            if eq or option in SBATCH_FLAGS or option in SBATCH_OPTIONAL_VALUE:
                cmd.options.append(arg)
            elif i + 1 < len(argv):
                cmd.options.append(f"{arg}={argv[i + 1]}")
                i += 1
            else:
                raise UsageError(f"{arg} needs a value")
        else:
            short = arg[:2]
            if short not in SBATCH_SHORT_OPTIONS and short not in SBATCH_SHORT_FLAGS:
                raise UsageError(f"unknown sbatch option {arg!r}")
            if short in SBATCH_SHORT_FLAGS or len(arg) > 2:
                cmd.options.append(arg)
            elif i + 1 < len(argv):
                cmd.options.append(f"{arg} {argv[i + 1]}")
                i += 1
            else:
                raise UsageError(f"{arg} needs a value")
        i += 1
    return cmd


def env_options(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``SBATCH_*`` variables as options (sbatch reads them at submit; the daemon's
    later submissions would not see them)."""
    out = []
    for var, option in SBATCH_ENV.items():
        value = environ.get(var)
        if value is None:
            continue
        out.append((option if option in _ENV_FLAGS else f"{option}={value}", var))
    return out


def submission_options(cmd: SearchCommand, script_text: str,
                       environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every user option in sbatch's order of precedence (the later wins): the
    script's lines, the SBATCH_* variables, the command line."""
    return [*script_header(script_text), *env_options(environ),
            *((o, "command line") for o in cmd.options)]
