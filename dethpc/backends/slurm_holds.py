"""Why a pending job is held, who can release it, and what to tell the user.

Owns: ``hold_of`` (a job's pending reason, as squeue prints it, to a ``Hold``: an
administrator's hold, the user's own, or one slurmctld placed after failed launches)
and each kind's words for ``describe``. Pure, table-tested.
Measured on Slurm 25.11 (docs/dev-cluster.md): ``scontrol hold`` by root reads
``JobHeldAdmin`` and the job's owner may not release it ("Access/permission denied");
``scontrol uhold`` reads ``JobHeldUser`` and the owner may release it; a batch job
whose launch failed more than ``MaxBatchRequeue`` times reads ``JobHoldMaxRequeue``
(job_mgr.c ``_handle_requeue_limit``); one whose launch failed (a prolog error) is
held as the user's (``JobHeldUser``, "launch failed requeued held"), and the node is
drained ("Prolog error"). Which holds dethpc lifts itself is the reconcile's rule
(``job_rules.release_held``): a single failed launch (``LAUNCH_FAILED``: the node that
failed is drained, so the job starts elsewhere) and an expedited requeue's hold; never
an administrator's, the user's own or the launch-failure limit's (``LAUNCH_LIMIT``).
Must not: run commands or release anything itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class HoldKind(enum.Enum):
    ADMIN = "admin"
    USER = "user"
    #: one failed launch (a prolog error): Slurm drained the node and held the job
    LAUNCH_FAILED = "launch_failed"
    #: launches failed past ``MaxBatchRequeue``: something beyond one node is wrong
    LAUNCH_LIMIT = "launch_limit"


@dataclass(frozen=True)
class Hold:
    kind: HoldKind
    #: the pending reason as Slurm printed it
    reason: str

    @property
    def after_failed_launch(self) -> bool:
        """Slurm placed it because the job's launch failed (once, or past the limit)."""
        return self.kind in (HoldKind.LAUNCH_FAILED, HoldKind.LAUNCH_LIMIT)

    def explain(self, ref: str) -> str:
        """One sentence for ``describe``: who held job ``ref`` and how it goes on."""
        if self.kind is HoldKind.ADMIN:
            return (f"job {ref} is held by an administrator ({self.reason}): it runs when "
                    "they release it (only an operator may); `dethpc experiment kill` if it "
                    "should not wait")
        if self.kind is HoldKind.LAUNCH_FAILED:
            return (f"Slurm held job {ref} after its launch failed ({self.reason}; the node "
                    "is drained: `sinfo -R`): the daemon releases it and it runs elsewhere, "
                    "from the trial's last checkpoint (a counted restart)")
        if self.kind is HoldKind.LAUNCH_LIMIT:
            return (f"Slurm held job {ref} after its launches failed too often "
                    f"({self.reason}; bad nodes? `sinfo -R`): `scontrol release {ref}` runs "
                    "it again, from the trial's last checkpoint")
        return (f"job {ref} is held ({self.reason}): `scontrol release {ref}` lets it run")


#: reasons (squeue's Reason column; state descriptions included) -> kind
_KINDS: tuple[tuple[str, HoldKind], ...] = (
    ("launch failed requeued held", HoldKind.LAUNCH_FAILED),
    ("launch failure limit exceeded requeued held", HoldKind.LAUNCH_LIMIT),
    ("JobHoldMaxRequeue", HoldKind.LAUNCH_LIMIT),
    ("JobHeldAdmin", HoldKind.ADMIN),
    ("JobHeldUser", HoldKind.USER),
    ("job requeued in held state", HoldKind.USER),
)


def hold_of(reason: str | None) -> Hold | None:
    """The hold a pending job's ``reason`` names, else None."""
    text = (reason or "").strip()
    for marker, kind in _KINDS:
        if marker.lower() in text.lower():
            return Hold(kind, text)
    return None
