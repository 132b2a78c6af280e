"""The accounting records of one dev cluster, in its own slurmdbd.

Owns: ``Accounting`` -- the cluster's record (``sacctmgr add cluster``), reading QoS
and associations (``accounting_state``) and running the ``sacctmgr`` commands that
``site.plan_accounting`` asks for (none when the records are current; limits changed
by hand are restored): QoS ``normal`` and ``limited``, accounts ``dethpc`` and
``ml-team``, root, ``$SUDO_USER``, ``$DETHPC_DEVCLUSTER_USERS`` and the users named to
``up`` and the site's unlimited users (the scale profile's) in every account, the test user
in ``ml-team`` only. Every command runs through
the cluster's runner, so it reaches this cluster's slurmdbd (``SLURM_CONF``), never
another lane's.
Must not: plan (``site`` does) or create Unix users (``users`` does).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence

from dethpc.common.jobenv import ENV_DEVCLUSTER_USERS
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.layout import DevClusterLayout
from dethpc.devcluster.site import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    AccountingState,
    member_names,
    parse_assocs,
    parse_qos,
    plan_accounting,
)


class Accounting:
    """``sacctmgr`` against ``layout``'s cluster, through ``runner``."""

    def __init__(self, layout: DevClusterLayout, runner: CommandRunner) -> None:
        self.layout, self.runner = layout, runner

    def ensure_cluster_record(self) -> None:
        name = self.layout.cluster_name
        out = self.runner.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"],
                              timeout=30).stdout
        if name not in out.split():
            self.runner.run(["sacctmgr", "-i", "add", "cluster", name], timeout=30)

    def ensure_accounts(self, users: Sequence[str]) -> None:
        """QoS, accounts and associations as ``site.plan_accounting`` plans them: root,
        $SUDO_USER, $DETHPC_DEVCLUSTER_USERS and ``users`` in every account (default
        account ``dethpc``, QoS ``normal``). Three queries when nothing is missing."""
        members = [u for u in member_names(
            ["root", os.environ.get("SUDO_USER", ""), *users,
             *os.environ.get(ENV_DEVCLUSTER_USERS, "").split(","),
             *self.layout.site.unlimited_users]) if user_exists(u)]
        self.apply(members)

    def state(self) -> AccountingState:
        run = self.runner.run
        qos = run(["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"], timeout=30)
        assoc = run(["sacctmgr", "-n", "-P", "show", "assoc",
                     f"cluster={self.layout.cluster_name}", f"format={ASSOC_FORMAT}"],
                    timeout=30)
        return AccountingState(parse_qos(qos.stdout), parse_assocs(assoc.stdout))

    def apply(self, members: Sequence[str], test_user: str | None = None) -> None:
        """Run the ``sacctmgr`` commands ``plan_accounting`` asks for (none when current)."""
        plan = plan_accounting(self.layout.site, self.layout.cluster_name, self.state(),
                               members, test_user)
        for argv in plan:
            self.runner.run(["sacctmgr", "-i", *argv], timeout=30)


def user_exists(user: str) -> bool:
    """A local account of that name exists (``getpwnam``)."""
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True
