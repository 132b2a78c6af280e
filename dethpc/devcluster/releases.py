"""The Slurm releases a dev cluster can run, and what differs between them.

Owns: ``SlurmRelease`` (Debian's 22.05, the default, and 25.11 built from the vendored
source) and its traits: whether it is built here and from which tarball, how its
slurm.conf spells a setting that was renamed, and how a process finds its commands
(``path_prefix``). One table, so that a template or a test asks the release instead of
comparing version strings.
Must not: build Slurm (``slurm_build``), start daemons or write files.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReleaseTraits:
    #: the tarball's name under third_party/slurm (None: Debian's package)
    tarball: str | None
    #: the release's preemption setting that sends a job's --signal before SIGTERM:
    #: 22.05 knows only ``SlurmctldParameters=preempt_send_user_signal`` (its slurmctld
    #: stops on ``PreemptParameters``); 23.02+ spell it ``PreemptParameters=send_user_signal``
    send_user_signal: tuple[str, str]
    #: a requeued batch job is held (JobHeldAdmin) after this many requeues unless
    #: slurm.conf says otherwise (``MaxBatchRequeue``; 22.05 has no such setting)
    max_batch_requeue: int | None
    #: SlurmctldParameters=rl_enable (per-user RPC rate limiting) exists (23.02+)
    rate_limiting: bool
    #: ``--requeue=expedite`` exists; the dev cluster allows it
    #: (``SlurmctldParameters=enable_expedited_requeue``)
    expedited_requeue: bool = False
    #: the nodes run the dev cluster's Prolog (``DevClusterLayout.prolog``), which fails a
    #: launch when a test asks: the launch-failure hold, proven where the tests run
    fault_prolog: bool = False
    #: the pyslurm release built against this Slurm for the tests (None: PyPI has no
    #: pyslurm for it; pyslurm's major.minor must equal Slurm's)
    pyslurm: str | None = None


class SlurmRelease(enum.Enum):
    """A Slurm release of a dev cluster (the value is what ``--slurm`` takes)."""

    V22_05 = "22.05"
    V25_11 = "25.11"

    @property
    def traits(self) -> ReleaseTraits:
        return _TRAITS[self]

    @property
    def built(self) -> bool:
        """Built from source here (else Debian's package, on the default PATH)."""
        return self.traits.tarball is not None

    @classmethod
    def parse(cls, text: str | None) -> SlurmRelease:
        """``--slurm``'s value (None or empty: the default, 22.05)."""
        if not text:
            return cls.V22_05
        for release in cls:
            if release.value == text.strip():
                return release
        raise ValueError(f"--slurm {text!r} is not a dev-cluster Slurm release; allowed: "
                         f"{', '.join(r.value for r in cls)}")


DEFAULT_RELEASE = SlurmRelease.V22_05

_TRAITS: dict[SlurmRelease, ReleaseTraits] = {
    SlurmRelease.V22_05: ReleaseTraits(
        tarball=None, send_user_signal=("SlurmctldParameters", "preempt_send_user_signal"),
        max_batch_requeue=None, rate_limiting=False),
    SlurmRelease.V25_11: ReleaseTraits(
        tarball="slurm-25.11.7.tar.xz", send_user_signal=("PreemptParameters", "send_user_signal"),
        max_batch_requeue=5, rate_limiting=True, pyslurm="25.11.2", expedited_requeue=True,
        fault_prolog=True),
}


def path_prefix(prefix: Path | None) -> list[str]:
    """The directories to put before ``$PATH`` for a build installed under ``prefix``
    (none for Debian's Slurm)."""
    return [] if prefix is None else [str(prefix / "bin"), str(prefix / "sbin")]
