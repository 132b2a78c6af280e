"""Several faults in one ASHA experiment on the dev cluster (issue 15 item 1, short form).

One ``adaptive_asha`` experiment of 12 toy trials, driven by a real ``dethpc daemon
run``, suffers a seeded schedule of faults, each at a random moment once the
experiment has made some progress: 3 daemon SIGKILLs (plus the restarts), a slurmctld
restart, and a slurmdbd outage. The outage is the hard one: the daemon is SIGKILLed,
slurmdbd is stopped, one of the experiment's running jobs ends and **leaves squeue**
(for real: the slurmctld restart put slurmctld on a copy of slurm.conf with
``MinJobAge=3``, so a finished job is purged about ten seconds after it ends instead of
five minutes; the end of the test restarts slurmctld on the site's own slurm.conf,
mid-experiment: a second restart). The daemon comes back while slurmdbd is still
down: squeue no longer lists the job, sacct fails, and the daemon must decide nothing
about it (no "lost" verdict, no resubmit). slurmdbd comes back; sacct answers empty
for a few seconds until slurmctld has sent its queued records (the daemon waits on
``sdiag``'s DBD agent queue), then the daemon ingests the job.

Afterwards: the experiment COMPLETED; for every trial and job, sacct (``-D``: every
run), dethpc's job rows and the exit records agree one to one (each job ran exactly
once, none lost, none that dethpc does not know); the trial count is what the searcher
created; and replaying the recorded searcher calls into a fresh searcher built
through the registry gives the same create/stop decisions and the same final state the
store holds, while the validations fed match the metric rows one to one.

Wall time: 45-125 s measured on the 2-core dev machine while other tests loaded it
(printed). The slurmdbd outage lasts 6-25 s and holds the dev cluster's lock (a
concurrent ``up`` waits); slurmctld and slurmdbd are restored in a ``finally``.
"""

from __future__ import annotations

import json
import time

from dethpc.backends.base import JobRequest
from dethpc.backends.slurm import SlurmBackend
from dethpc.backends.slurm_parse import nodes_registering
from dethpc.common.runner import CommandRunner
from dethpc.control.job_end import UNKNOWN_TICKS
from dethpc.devcluster.faults import ClusterFaults
from tests.slurm.fixtures.multifault import MultiFaultRun, schedule

SEED = 15
TRIALS = 12


def test_asha_survives_daemon_kills_a_slurmctld_restart_and_a_slurmdbd_outage(
        tmp_path, slurm_cluster) -> None:
    t0 = time.monotonic()
    run = MultiFaultRun(tmp_path, trials=TRIALS, step_time=0.3, seed=SEED, say=print)
    steps = schedule(SEED, trials=TRIALS, kills=3, ctld=1, dbd=1)
    print("schedule:", steps)
    run.run(steps, timeout=420)
    f = run.check()
    print(json.dumps(f.as_json(), indent=1))
    print(f"multifault wall time: {time.monotonic() - t0:.1f} s")
    assert f.mismatches == [], f.mismatches
    assert f.state == "COMPLETED"
    assert f.kills >= 3 and f.ctld_restarts >= 2 and f.dbd_outages == 1, f
    assert f.gone_while_down, "no job left squeue while the daemon and slurmdbd were down"
    assert f.sacct_failures >= 2, "the daemon never had to ask a failing sacct"
    # polls right after slurmdbd came back (without the sdiag check: 25 UNKNOWN in a row)
    assert f.probe_unknown_streak < UNKNOWN_TICKS, "a job would have been judged lost"
    assert f.trials == f.created == TRIALS
    assert f.decisions.get("Stop", 0) >= 1, f.decisions   # ASHA did stop losers


def test_the_submit_check_right_after_a_slurmctld_restart_waits_for_the_nodes(
        tmp_path, slurm_cluster) -> None:
    """For about 4 s after slurmctld restarts its nodes read UNKNOWN and ``sbatch
    --test-only`` refuses every job ("Requested node configuration is not available"):
    ``dethpc submit``'s check (``SlurmBackend.judge``) asks again until they have
    registered instead of refusing a valid experiment. About 10 s."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    request = JobRequest(name="dethpc-judge-after-restart", comment="dethpc:test",
                         script=script, workdir=tmp_path, extra_args=("--partition=debug",))
    backend = SlurmBackend(CommandRunner(timeout=30.0, retries=0))
    faults = ClusterFaults()
    try:
        faults.restart_slurmctld(wait_nodes=False)
        states = CommandRunner(timeout=30.0).run(["sinfo", "-h", "-N", "-o", "%T"]).stdout
        verdict = backend.judge(request)
    finally:
        faults.wait_nodes_usable()
        faults.restore()
    assert nodes_registering(states), f"the nodes had registered already: {states}"
    assert verdict is None, verdict
