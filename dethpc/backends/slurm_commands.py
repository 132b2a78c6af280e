"""The Slurm commands the surfaces need beyond a ``Backend``'s jobs: the user's own
``sbatch`` words (``dethpc sbatch`` and its pass-through of ``--help``/``--version``),
the admin check's probe job (``sbatch --wait``) and its cancel by name, and the queries
that read a site's settings (``scontrol show config|partition|node``, ``sacctmgr``).

Owns: the argv of each, run through the ``CommandRunner`` it is handed, so that no
module outside ``dethpc.backends`` (and the job side) names a Slurm command
(tests/unit/test_house_rules.py holds the tree to that).
Must not: parse the answers (``slurm_parse``, ``dethpc.surfaces.admin.facts``), decide
anything, or retry an ``sbatch`` (a retried sbatch may submit twice).
"""

from __future__ import annotations

from collections.abc import Sequence

from dethpc.common.runner import CommandResult, CommandRunner

#: the commands the admin check reads the cluster's own settings with
SITE_QUERIES: dict[str, list[str]] = {
    "config": ["scontrol", "show", "config"],
    "partitions": ["scontrol", "-a", "-o", "show", "partition"],
    "nodes": ["scontrol", "-o", "show", "node"],
}


def accounting_queries(user: str, cluster: str, qos_format: str,
                       assoc_format: str) -> dict[str, list[str]]:
    """The admin check's ``sacctmgr`` commands for ``user`` on ``cluster``."""
    where = ["where", f"user={user}"] + ([f"cluster={cluster}"] if cluster else [])
    return {
        "qos": ["sacctmgr", "-n", "-P", "show", "qos", f"format={qos_format}"],
        "assoc": ["sacctmgr", "-n", "-P", "show", "assoc", *where, f"format={assoc_format}"],
        "account": ["sacctmgr", "-n", "-P", "show", "account", "format=account"],
        "user": ["sacctmgr", "-n", "-P", "show", "user", user, "format=user,defaultaccount"],
    }


def run_sbatch(runner: CommandRunner, words: Sequence[str], *, input: str | None = None,
               timeout: float | None = None) -> CommandResult:
    """``sbatch WORDS`` exactly as given (never retried); its result whatever the exit
    code (the caller shows sbatch's own answer)."""
    return runner.run(["sbatch", *words], check=False, retry=False, input=input,
                      timeout=timeout)


def cancel_named(runner: CommandRunner, name: str) -> CommandResult:
    """``scancel --name=NAME``: the user's jobs of that name, whatever their ids."""
    return runner.run(["scancel", f"--name={name}"], check=False)
