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
