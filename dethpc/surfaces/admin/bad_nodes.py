"""The bad nodes of ``dethpc admin check``: what the experiments left out, for the admin.

Owns: ``bad_node_findings`` -- with the site's ``report_bad_nodes``, one warning per node
that an open (or lately ended) experiment excludes as a bad node
(``dethpc.control.bad_nodes``), with the failed runs, their owner and when.
Must not: drain or change a node: the finding says how, the admin decides.
"""

from __future__ import annotations

import time

from sqlmodel import col, or_, select

from dethpc.config.model import ClusterConfig
from dethpc.config.stored import parse_stored
from dethpc.control.bad_nodes import excluded
from dethpc.store import Store
from dethpc.store.models import Experiment
from dethpc.surfaces.admin.checks import Finding, Severity

#: experiments ended longer ago than this are not looked at
RECENT_S = 24 * 3600.0


def bad_node_findings(store: Store, cfg: ClusterConfig, now: float | None = None
                      ) -> list[Finding]:
    """One warning per (node, experiment) excluded now; none unless the site asks."""
    if not cfg.report_bad_nodes:
        return []
    now = time.time() if now is None else now
    out: list[Finding] = []
    with store.session() as s:
        exps = list(s.exec(select(Experiment).where(or_(
            col(Experiment.ended_at).is_(None), col(Experiment.ended_at) >= now - RECENT_S))
            .order_by(col(Experiment.id))))
        for exp in exps:
            assert exp.id is not None
            exp_cfg = parse_stored(exp.config_yaml)
            for bad in excluded(s, exp.id, exp_cfg.slurm.bad_nodes, now):
                last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(bad.last_at))
                out.append(Finding(
                    Severity.WARNING, exp_cfg.resources.resource_pool or cfg.default_pool,
                    "bad_node",
                    f"node {bad.node} is excluded by experiment {exp.id} ({exp.owner or '?'}): "
                    f"{len(bad.evidence)} failed runs in a row, the last at {last} "
                    f"({', '.join(f'trial {r.trial_id} job {r.job}' for r in bad.evidence)})",
                    f"read those jobs' logs (dethpc trial logs ID); if the node is at fault, "
                    f"scontrol update NodeName={bad.node} State=DRAIN Reason=... "
                    "(dethpc never drains a node)"))
    return out
