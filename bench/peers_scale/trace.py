"""Other users' jobs on the same GPUs: a seeded background trace (issue 48, item 2).

Owns: ``TraceSpec`` (how many GPUs, how busy, job sizes and durations, whose jobs) and
``background_trace`` -- a pure function, seed -> the jobs to submit, each
``(submit offset, gpus, duration, user)``: at offset 0 enough jobs to hold about
``busy_fraction`` of the GPUs (each with the rest of a run left, as in equilibrium),
then Poisson arrivals at the rate that keeps that load on average
(``busy x GPUs / (E[gpus] x E[duration])``), durations log-uniform between
``min_duration_s`` and ``max_duration_s``, every job on one node
(``gpus <= gpus_per_node``). Also ``offered_load``: the GPUs the trace would hold at a
time if every job started when submitted (the queue makes the real load lower or later;
that is the point of a busy queue).
Must not: submit anything (the benchmark's runner does, as the trace's users), or draw
from a global random state.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from dethpc.devcluster.profiles import BACKGROUND_USERS


@dataclass(frozen=True)
class BackgroundJob:
    submit_s: float
    gpus: int
    duration_s: float
    user: str


@dataclass(frozen=True)
class TraceSpec:
    total_gpus: int = 64
    horizon_s: float = 9000.0
    busy_fraction: float = 0.5
    gpus_per_node: int = 4
    #: (GPUs, weight): most background jobs are small
    sizes: tuple[tuple[int, float], ...] = ((1, 0.5), (2, 0.25), (4, 0.25))
    min_duration_s: float = 60.0
    max_duration_s: float = 1800.0
    users: tuple[str, ...] = BACKGROUND_USERS

    def __post_init__(self) -> None:
        if not 0 <= self.busy_fraction < 1:
            raise ValueError(f"busy_fraction: {self.busy_fraction} must be in [0, 1)")
        if self.total_gpus < 1 or self.horizon_s <= 0:
            raise ValueError("total_gpus and horizon_s must be positive")
        too_big = [g for g, _ in self.sizes if not 1 <= g <= self.gpus_per_node]
        if too_big or not self.sizes:
            raise ValueError(f"sizes: {too_big or 'none'} do not fit one node of "
                             f"{self.gpus_per_node} GPUs")
        if not 0 < self.min_duration_s < self.max_duration_s:
            raise ValueError("durations: need 0 < min_duration_s < max_duration_s")
        if not self.users:
            raise ValueError("users: at least one")

    @property
    def mean_gpus(self) -> float:
        total = sum(w for _, w in self.sizes)
        return sum(g * w for g, w in self.sizes) / total

    @property
    def mean_duration_s(self) -> float:
        """The mean of the log-uniform duration: (b - a) / ln(b / a)."""
        a, b = self.min_duration_s, self.max_duration_s
        return (b - a) / math.log(b / a)

    @property
    def arrival_rate(self) -> float:
        """Jobs per second that keep ``busy_fraction`` of the GPUs busy on average."""
        return self.busy_fraction * self.total_gpus / (self.mean_gpus * self.mean_duration_s)


def _job(rng: random.Random, spec: TraceSpec, submit_s: float, running: bool) -> BackgroundJob:
    """A new job (log-uniform duration), or one ``running`` since before the trace: the
    rest of a run drawn as in equilibrium (a job in progress at a random instant has a
    length-biased duration, uniform on [min, max] for a log-uniform law, and a uniform
    fraction of it is left)."""
    gpus = rng.choices([g for g, _ in spec.sizes], weights=[w for _, w in spec.sizes])[0]
    lo, hi = spec.min_duration_s, spec.max_duration_s
    if running:
        duration = rng.uniform(lo, hi) * rng.random()
    else:
        duration = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return BackgroundJob(submit_s=round(submit_s, 3), gpus=gpus,
                         duration_s=round(max(duration, 1.0), 3), user=rng.choice(spec.users))


def background_trace(seed: int, spec: TraceSpec | None = None) -> list[BackgroundJob]:
    """The jobs of seed ``seed``'s trace, by submit offset (see the module doc)."""
    spec = spec or TraceSpec()
    rng = random.Random(seed)
    jobs: list[BackgroundJob] = []
    target = spec.busy_fraction * spec.total_gpus
    held = 0
    while held < target:  # the queue is already busy when the benchmark begins
        job = _job(rng, spec, 0.0, running=True)
        if held + job.gpus > spec.total_gpus:
            break
        jobs.append(job)
        held += job.gpus
    t = 0.0
    rate = spec.arrival_rate
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= spec.horizon_s:
            break
        jobs.append(_job(rng, spec, t, running=False))
    return jobs


def offered_load(jobs: list[BackgroundJob], at_s: float) -> int:
    """GPUs held at ``at_s`` if every job ran from its submit offset for its duration."""
    return sum(j.gpus for j in jobs if j.submit_s <= at_s < j.submit_s + j.duration_s)
