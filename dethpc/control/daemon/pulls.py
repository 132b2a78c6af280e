"""The image gate: an experiment's container images are in the SIF cache, or on their way.

Owns: ``ImageGate.ready`` — before an experiment's trials are submitted: with
``containers.pull: login``, a pull not done yet is started or waited for in the
background (``dethpc.jobs.imagepull.Puller``) and this experiment's trials wait (no
other experiment does); with ``containers.pull: job`` on a backend with job
dependencies, one pre-pull job per image (submitted once, recorded under
``runs_root``, polled only while it has not left the queue), and the trials go out at
once with the sbatch arguments ``ready`` returns (``--dependency=afterok:...``); the
record a daemon killed around a pre-pull job's sbatch left is adopted by its job name
(``adopt_left``), also once that job has cached the image. A failed pull fails the
experiment with the runtime's words. ``ImageGate.check`` is the
tick's look at the pre-pull jobs trials wait on: one poll, only while such a job is
watched. ``dependency_args`` and ``placement_args`` are pure.
Must not: submit trials, or keep anything but a hint in memory: the watch of pre-pull
jobs is lost on restart, and a failed pull then shows as the trials' cancelled jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from dethpc.backends.base import Backend, JobInfo, JobRequest, JobState
from dethpc.common.errors import DethpcError
from dethpc.common.jobref import JobRef, job_refs
from dethpc.common.kinds import EventKind
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool
from dethpc.control.daemon.incidents import event, fail_experiment, fail_unstarted
from dethpc.control.submission import RefusalPolicy, Submission, SubmissionKind, adopt
from dethpc.jobs.directives import placement_directives
from dethpc.jobs.imagepull import Puller, PullJob, PullState, images_of, pull_job, pull_job_script
from dethpc.store import Store


def dependency_args(job_ids: Sequence[str]) -> tuple[str, ...]:
    """The sbatch arguments that make a submission wait for the pre-pull jobs ``job_ids``
    (and die with them when one fails); none without such jobs."""
    if not job_ids:
        return ()
    return (f"--dependency=afterok:{':'.join(job_ids)}", "--kill-on-invalid-dep=yes")


def placement_args(pool: ResourcePool) -> list[str]:
    """A pre-pull job runs where the experiment's trials will: their partition, QoS and
    account."""
    return placement_directives(pool)


def pull_failed(pj: PullJob, image: str, job_id: str, info: JobInfo) -> str:
    """A pre-pull job that ended without the image: forget it (a later experiment tries
    again) and say why, with the runtime's last words."""
    pj.record.unlink(missing_ok=True)
    return (f"the image {image!r} could not be pulled (job {job_id} ended "
            f"{info.raw_state or info.state.value}): {pj.tail()}")


class PullLedger:
    """A pre-pull job's record: files under ``runs_root`` (``PullJob``), shared by every
    experiment that needs the image. ``submitting`` holds the job name from before the
    sbatch until its id is in ``record``."""

    kind = SubmissionKind.PULL
    size = 1
    comment = ""    # the job's name is its identity

    def __init__(self, store: Store, pj: PullJob, image: str, exp_id: int,
                 name: str) -> None:
        self.store, self.pj, self.image, self.exp_id, self.name = store, pj, image, exp_id, name

    def record(self) -> None:
        self.pj.root.mkdir(parents=True, exist_ok=True)
        tmp = self.pj.submitting.with_suffix(".tmp")
        tmp.write_text(self.name + "\n")
        tmp.replace(self.pj.submitting)

    def confirm(self, refs: Sequence[str], note: str = "", adopted: bool = False) -> None:
        self.pj.record.write_text(refs[0] + "\n")
        self.pj.submitting.unlink(missing_ok=True)
        event(self.store, self.exp_id, EventKind.PULL,
              f"pre-pull job {refs[0]} for {self.image}"
              + (" (adopted after a restart)" if adopted else ""))

    def give_back(self) -> None:
        self.pj.submitting.unlink(missing_ok=True)


class ImageGate:
    def __init__(self, store: Store, cluster: ClusterConfig, backend: Backend, *,
                 python: str, tag: str, clock: Callable[[], float],
                 policy: RefusalPolicy) -> None:
        self.store, self.cluster, self.backend = store, cluster, backend
        self.python, self.tag, self.clock = python, tag, clock
        self.submission = Submission(backend, policy)
        #: image pulls into the SIF cache, in the background (containers.pull: login)
        self.puller: Puller | None = None
        #: pre-pull jobs some experiment's trials depend on: job id -> (image, experiments)
        self.pull_watch: dict[str, tuple[str, set[int]]] = {}

    def ready(self, exp_id: int, cfg: ExperimentConfig) -> tuple[str, ...] | None:
        """None while the experiment's trials must wait (a pull is under way, or failed:
        then the experiment is failed too); else the sbatch arguments they need (none, or
        a dependency on their pre-pull jobs)."""
        settings = self.cluster.containers
        images = images_of(cfg, self.cluster)
        if not images:
            return ()
        if settings.pull == "job" and self.backend.traits.job_dependencies:
            return self.pulled_by_jobs(exp_id, cfg, images)
        if self.puller is None:
            self.puller = Puller(settings)
        for image in images:
            status = self.puller.state(image)
            if status.state == PullState.FAILED:
                self.fail_unstarted(exp_id, f"the image {image!r} could not be pulled: "
                                            f"{status.message}")
                return None
            if status.state == PullState.PULLING:
                return None
        return ()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait for the background pulls this process started; whether there were any.
        For a one-pass daemon (``Daemon.tick_once``): what a pull ended in is kept in
        this process's memory only, so the pass that started it must see its end."""
        if self.puller is None or not self.puller.futures:
            return False
        self.puller.wait(timeout=timeout)
        return True

    def pulled_by_jobs(self, exp_id: int, cfg: ExperimentConfig,
                       images: list[str]) -> tuple[str, ...] | None:
        """``containers.pull: job``: each image's pre-pull job (submitted once, recorded
        under ``runs_root``), polled only while it has not left the queue."""
        from dethpc.jobs.containers import image_path

        settings = self.cluster.containers
        deps: list[str] = []
        for image in images:
            pj = pull_job(Path(self.cluster.runs_root), settings, image)
            if image_path(settings, image).is_file():
                # a pull job a killed daemon sent may have cached the image since: its
                # record is still adopted, or no record would ever know that job
                self.adopt_left(exp_id, pj, image)
                continue
            job_id = pj.job_id()
            if job_id is None:
                job_id = self.submit_pull(exp_id, cfg, pj, image)
                if job_id is None:
                    return None
            info = self.backend.poll([JobRef.parse(job_id)]).get(job_id)
            if info is not None and info.state.is_terminal:
                if info.state == JobState.COMPLETED and image_path(settings, image).is_file():
                    continue
                self.fail_unstarted(exp_id, pull_failed(pj, image, job_id, info))
                return None
            deps.append(job_id)
            self.pull_watch.setdefault(job_id, (image, set()))[1].add(exp_id)
        return dependency_args(deps)

    def submit_pull(self, exp_id: int, cfg: ExperimentConfig, pj: PullJob,
                    image: str) -> str | None:
        """``image``'s pre-pull job through the one submission protocol (its name
        recorded first, ``PullLedger``; a record a killed daemon left is adopted by that
        name, never submitted twice): its job id, or None while its trials wait (refused
        over a limit: the budget's answer) or when it failed (the experiment too)."""
        ledger = PullLedger(self.store, pj, image, exp_id, f"dethpc-pull-{self.tag}-{pj.key}")
        adopted = self.adopt_left(exp_id, pj, image)
        if adopted is not None:
            return adopted
        settings = self.cluster.containers
        pj.root.mkdir(parents=True, exist_ok=True)
        pj.script.write_text(pull_job_script(settings, image, self.python))
        placement = placement_args(self.cluster.pool(cfg.resources.resource_pool))
        ledger.record()
        try:
            refs = self.submission.submit(ledger, JobRequest(
                name=ledger.name, comment=f"dethpc:pull={image}",
                script=pj.script, workdir=pj.root, time_limit_s=3600,
                extra_args=(*placement, f"--output={pj.output}", "--ntasks=1")))
        except DethpcError as exc:
            # the record stays: whether sbatch took the job before it failed is not
            # known, and the next experiment that needs the image adopts it by name
            self.fail_unstarted(exp_id, f"the pre-pull job of {image!r} was refused: {exc}")
            return None
        return refs[0] if refs else None

    def adopt_left(self, exp_id: int, pj: PullJob, image: str) -> str | None:
        """The record of ``image``'s pre-pull job that a daemon killed around its sbatch
        left (a name, no job id), if any: the job Slurm has under that name is recorded
        (adopted, one ``backend.find``); none found, the record is dropped. The adopted
        job's id, else None."""
        if not pj.submitting.is_file():
            return None
        name = pj.submitting.read_text().strip() or f"dethpc-pull-{self.tag}-{pj.key}"
        if adopt(self.backend, [PullLedger(self.store, pj, image, exp_id, name)]):
            return pj.job_id()
        return None

    def check(self) -> None:
        """Pre-pull jobs that trials wait on: a failed one fails their experiments with
        the runtime's words before the reconciler sees Slurm kill the dependent jobs
        (one poll, only while such a job is watched)."""
        if not self.pull_watch:
            return
        infos = self.backend.poll(job_refs(sorted(self.pull_watch)))
        settings = self.cluster.containers
        for job_id, (image, exp_ids) in list(self.pull_watch.items()):
            info = infos.get(job_id)
            if info is None or not info.state.is_terminal:
                continue
            del self.pull_watch[job_id]
            pj = pull_job(Path(self.cluster.runs_root), settings, image)
            if info.state == JobState.COMPLETED and pj.job_id() == job_id:
                continue
            message = pull_failed(pj, image, job_id, info)
            for exp_id in sorted(exp_ids):
                fail_experiment(self.store, exp_id, message)

    def fail_unstarted(self, exp_id: int, message: str) -> None:
        fail_unstarted(self.store, exp_id, message, self.clock)
