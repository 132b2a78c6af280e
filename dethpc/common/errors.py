"""The one error family of dethpc.

Owns: every exception type a user may see. A message says what failed, why and
how to fix it. The CLI turns any ``DethpcError`` into a message and a non-zero
exit code without a traceback. Must not import any other dethpc module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class DethpcError(Exception):
    """Base of every expected failure. ``exit_code`` is what the CLI returns."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class FieldError:
    """One problem in a config: where (dotted path), what was found, what is allowed."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(DethpcError):
    """A config (experiment or cluster) is invalid; lists every problem found."""

    exit_code = 2

    def __init__(self, errors: Sequence[FieldError], source: str = "config") -> None:
        self.errors = list(errors)
        self.source = source
        lines = [f"{source} is invalid ({len(self.errors)} error(s)):"]
        lines += [f"  - {e}" for e in self.errors]
        super().__init__("\n".join(lines))


class CommandError(DethpcError):
    """An external command failed; carries argv, exit code, stdout and stderr."""

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int | None,
        stdout: str = "",
        stderr: str = "",
        reason: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.reason = reason
        cmd = " ".join(self.argv)
        what = reason or f"exited with code {returncode}"
        detail = (stderr or stdout).strip()
        msg = f"command `{cmd}` {what}"
        if detail:
            msg += f": {detail[-2000:]}"
        super().__init__(msg)


class StoreError(DethpcError):
    """The state database is unusable (wrong schema version, unreachable URL, ...)."""


class NotFoundError(DethpcError):
    """An experiment, trial or checkpoint that the user named does not exist."""


class SubmitError(DethpcError):
    """A job cannot be submitted as asked (bad partition, allocation cannot fit, ...)."""


class SubmitLimitError(SubmitError):
    """Slurm refused a submission over a limit (``QOSMaxSubmitJobPerUserLimit``, ...):
    the job may be accepted once some of the user's jobs end. ``word`` is Slurm's."""

    def __init__(self, word: str, detail: str) -> None:
        super().__init__(f"sbatch refused the job over a limit ({word}): {detail}")
        self.word = word
        self.detail = detail


class ContextError(DethpcError):
    """The model directory cannot be snapshotted (too large, missing, ...)."""


class UnsupportedError(DethpcError):
    """A name of Determined's API that dethpc refuses, raised where the user's code calls
    (or reads) it: the message names the Determined feature and what to do instead
    (``dethpc.core.determined_rules`` holds every such message). Never an
    ``AttributeError``: ``name`` is Determined's dotted name (``determined.X.y``)."""

    exit_code = 2

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class EnterpriseOnlyError(DethpcError):
    """Determined's ``det.errors.EnterpriseOnlyError`` (a feature of its Enterprise
    edition's master): dethpc has no master and never raises it; defined so that code
    catching it runs unchanged."""


class InvalidExperimentException(DethpcError):  # noqa: N818 - Determined's name
    """Determined's ``det.errors.InvalidExperimentException``: training code asked for
    what cannot work (``wrap_lr_scheduler`` of a ``ReduceLROnPlateau`` with an automatic
    step mode, or of a scheduler over an optimizer ``wrap_optimizer`` did not return).
    Determined derives it from ``BaseException``; here it is a ``DethpcError`` (an
    ``Exception``), so the CLI reports it without a traceback."""


class CheckpointNotFound(DethpcError):  # noqa: N818 - Determined's name
    """Determined's ``det.errors.CheckpointNotFound``: a checkpoint uuid that this trial's
    checkpoint directory does not hold (``CheckpointContext.restore_path``,
    ``get_metadata``, ``download``, ``delete``)."""


class InvalidHP(Exception):  # noqa: N818 - Determined's name
    """Determined's ``det.InvalidHP``: training code raises it when its hyperparameters
    cannot work. Raised out of ``core.init()``'s block (or a ``Trainer``), the trial
    reports an early exit (``invalid_hp``) and the process exits 0, as in Determined; the
    searcher then treats the trial as one that exited early. Not a ``DethpcError``: it is
    the user's signal, not a dethpc failure."""

    def __init__(self, msg: str = "...") -> None:
        if not isinstance(msg, str):
            raise TypeError("InvalidHP takes a message string, not "
                            f"{type(msg).__name__}")
        super().__init__(msg)
        self.msg = msg
