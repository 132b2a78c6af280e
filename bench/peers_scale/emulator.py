"""The trial every system of the peers-at-scale benchmark runs (issue 48): sleeping work
that replays a recorded learning curve, so 64-128 "GPUs" fit on 2 cores.

Owns: ``ReplayCurve`` and ``load_curves`` (bench/asha's ``curves_cnn_long.json``: 128
small CNNs on digits, 64 points of 128 batches each, with the seconds each took and the
validation loss after each), ``EmulatorSpec`` (start-up, checkpoint and time-scale costs)
and ``TrialEmulator``, one run of one trial: ``start`` (the start-up: the container's start,
the system's own client import, the CUDA/framework initialisation; see below),
``restore`` (a
sleep, then a real small state file read), ``train_step`` (a sleep of the recorded step's
seconds x ``time_scale``), ``validate`` (the recorded loss after the step), ``save`` (a
sleep, then a real state file written atomically) and ``end``; every one of them logged
(``worklog``), so that redone and lost work is counted exactly afterwards.

The start-up rule (issue 48; every system gets the same one): a real GPU job pays its
container's start **once per Slurm job run on a node** and CUDA/framework initialisation
**once per process** (a CUDA context cannot survive ``fork``, and a fresh interpreter has
none). ``start`` therefore waits for the container of its job run (``container_key``:
``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``, ``SLURMD_NODENAME``): the first process of that
run on that node starts it (``join_container`` writes a marker file with its ready time,
atomically, and sleeps ``container_s``), every later process of the run waits only for
what is left of it (nothing, once it is up); then the client import; then, in the first
``start`` of this process (``ProcessState``, by pid, so a forked child pays again), the
CUDA sleep ``cuda_s``. Outside a Slurm job the process is its own container run. The
defaults split the 10 s of before in half: ``startup_s`` is the total a cold process of a
fresh job pays, ``container_s`` its container part (default: half of it).
Must not: decide when to validate, checkpoint or stop (the system under test does), or
talk to Slurm.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.peers_scale.worklog import EndReason, Event, WorkLog

CURVES = Path(__file__).resolve().parents[1] / "asha" / "curves_cnn_long.json"
#: the state file a checkpoint holds (in the directory the system gives ``save``)
STATE_FILE = "emulator_state.json"


@dataclass(frozen=True)
class ReplayCurve:
    """One recorded curve: step ``k`` (1-based) took ``step_s[k-1]`` seconds and left a
    validation loss of ``loss[k-1]``; a validation took ``val_s``."""

    index: int
    step_s: tuple[float, ...]
    loss: tuple[float, ...]
    val_s: float
    #: units (batches) per step, as recorded
    units_per_step: int

    @property
    def steps(self) -> int:
        return len(self.step_s)


def load_curves(path: Path = CURVES) -> list[ReplayCurve]:
    """The curves of a bench/asha curves file (cumulative ``train_seconds`` per point
    turned into each step's own seconds)."""
    raw = json.loads(path.read_text())
    curves = []
    for i, c in enumerate(raw["curves"]):
        cum = [0.0, *c["train_seconds"]]
        lengths = c["lengths"]
        per = [b - a for a, b in zip([0, *lengths], lengths, strict=False)]
        if len(set(per)) != 1:
            raise ValueError(f"{path}: curve {i} has uneven points {sorted(set(per))}")
        curves.append(ReplayCurve(index=i, step_s=tuple(b - a for a, b in zip(cum, cum[1:],
                                                                            strict=False)),
                                  loss=tuple(c["val_loss"]), val_s=float(c["val_seconds"]),
                                  units_per_step=per[0]))
    return curves


@dataclass(frozen=True)
class EmulatorSpec:
    """The costs of an emulated trial, in seconds."""

    #: the whole start-up of a cold process in a fresh job run: the container's start
    #: plus the CUDA/framework initialisation (``cuda_s``)
    startup_s: float = 10.0
    #: multiplies every recorded step and validation time (1.0: as recorded, ~1 s a step)
    time_scale: float = 1.0
    save_s: float = 2.0
    load_s: float = 2.0
    #: the state file's payload (a real file: storage traffic is part of the cost)
    state_bytes: int = 4096
    #: of ``startup_s``, the container's start: once per Slurm job run on a node
    #: (None: half of ``startup_s``)
    container_s: float | None = None

    def __post_init__(self) -> None:
        if self.container_s is None:
            object.__setattr__(self, "container_s", self.startup_s / 2)
        for name in ("startup_s", "save_s", "load_s", "container_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: {getattr(self, name)} must be >= 0")
        if self.container_part_s > self.startup_s:
            raise ValueError(f"container_s: {self.container_s} must be <= startup_s "
                             f"({self.startup_s})")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale: {self.time_scale} must be > 0")
        if self.state_bytes < 0:
            raise ValueError(f"state_bytes: {self.state_bytes} must be >= 0")

    @property
    def container_part_s(self) -> float:
        """The container's start (``container_s``, resolved)."""
        return float(self.startup_s / 2 if self.container_s is None else self.container_s)

    @property
    def cuda_s(self) -> float:
        """The CUDA/framework initialisation: once per process."""
        return self.startup_s - self.container_part_s

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> EmulatorSpec:
        """The spec a runner passed to a trial's process (``PEERS_STARTUP_S``,
        ``PEERS_CONTAINER_S``, ``PEERS_TIME_SCALE``, ``PEERS_SAVE_S``, ``PEERS_LOAD_S``;
        the defaults otherwise)."""
        container = env.get("PEERS_CONTAINER_S", "")
        return cls(startup_s=float(env.get("PEERS_STARTUP_S", "10")),
                   time_scale=float(env.get("PEERS_TIME_SCALE", "1")),
                   save_s=float(env.get("PEERS_SAVE_S", "2")),
                   load_s=float(env.get("PEERS_LOAD_S", "2")),
                   container_s=float(container) if container else None)

    def to_env(self) -> dict[str, str]:
        """The ``PEERS_*`` variables ``from_env`` reads back (the state file's size is
        not passed: the trials' default)."""
        return {"PEERS_STARTUP_S": str(self.startup_s),
                "PEERS_CONTAINER_S": str(self.container_part_s),
                "PEERS_TIME_SCALE": str(self.time_scale), "PEERS_SAVE_S": str(self.save_s),
                "PEERS_LOAD_S": str(self.load_s)}


def container_key(env: Mapping[str, str]) -> str | None:
    """The container run a process belongs to: ``<job>.<restart>.<node>`` inside a Slurm
    job (a requeued job's next run starts its container again; each node of a job has
    its own), None outside one."""
    job = env.get("SLURM_JOB_ID", "")
    if not job:
        return None
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    return f"{job}.{env.get('SLURM_RESTART_COUNT', '0') or '0'}.{node}"


def join_container(directory: Path, key: str, container_s: float,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.time) -> tuple[float, float]:
    """Wait until container run ``key`` is up; (the seconds waited, when it was up). The
    first caller
    starts it: its marker ``directory/key`` (JSON ``started``, ``ready``) appears whole
    (a hard link of a written file, which fails if another got there first), then it
    sleeps ``container_s``; a later caller sleeps only until the recorded ``ready``."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / key
    if not marker.exists():
        now = clock()
        tmp = directory / f".{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_text(json.dumps({"started": now, "ready": now + container_s,
                                   "pid": os.getpid()}))
        try:
            os.link(tmp, marker)
        except FileExistsError:
            pass
        else:
            sleep(container_s)
            return container_s, now + container_s
        finally:
            tmp.unlink()
    ready = float(json.loads(marker.read_text())["ready"])
    wait = max(0.0, ready - clock())
    if wait:
        sleep(wait)
    return wait, ready


@dataclass
class ProcessState:
    """What this interpreter has initialised: the pid that paid CUDA (a forked child has
    another pid: it pays again, as a real one must), and when a CUDA initialisation
    begun ahead of the trial (``init_cuda``) began."""

    cuda_pid: int | None = None
    cuda_began: float | None = None

    def needs_cuda(self) -> bool:
        return self.cuda_pid != os.getpid()

    def begin_cuda(self, now: float) -> None:
        if self.needs_cuda():
            self.cuda_pid, self.cuda_began = os.getpid(), now

    def pay_cuda(self, cuda_s: float, now: float, not_before: float = 0.0) -> float:
        """The seconds of CUDA initialisation this process still owes at ``now``: all of
        ``cuda_s`` when cold, what is left of one begun ahead, else 0; then it is paid.
        One begun ahead counts from ``not_before`` if that is later (the container it
        runs in was up only then: nothing initialises CUDA before its container)."""
        if self.needs_cuda():
            owed = cuda_s
        elif self.cuda_began is not None:
            owed = max(0.0, max(self.cuda_began, not_before) + cuda_s - now)
        else:
            owed = 0.0
        self.cuda_pid, self.cuda_began = os.getpid(), None
        return owed


#: this process's state (tests pass their own)
PROCESS = ProcessState()


def init_cuda() -> None:
    """Begin this process's CUDA initialisation now, before its trial arrives: what a
    dethpc pool worker's spare does with ``preload: [..., "torch.cuda:init"]``, here
    ``bench.peers_scale.emulator:init_cuda``. Nothing sleeps here (the trial's spec is not
    known yet): the trial's ``start`` waits for what is left of its ``cuda_s`` counted
    from this moment."""
    PROCESS.begin_cuda(time.time())


class TrialEmulator:
    """One run of trial ``trial`` replaying ``curve``; each action sleeps and is logged to
    ``log`` under this run's id (``run``, default a fresh one)."""

    def __init__(self, trial: str, curve: ReplayCurve, log: WorkLog,
                 spec: EmulatorSpec | None = None, run: str | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time,
                 env: Mapping[str, str] = os.environ,
                 process: ProcessState = PROCESS) -> None:
        self.trial, self.curve, self.log = trial, curve, log
        self.spec = spec or EmulatorSpec()
        self.run = run or uuid.uuid4().hex[:12]
        self._sleep, self._clock = sleep, clock
        self._env, self._process = env, process
        self.step = 0

    def _record(self, event: Event, **extra: object) -> None:
        self.log.write({"trial": self.trial, "run": self.run, "event": event.value,
                        "step": self.step, "wall": self._clock(), **extra})

    @property
    def done(self) -> bool:
        return self.step >= self.curve.steps

    def container_dir(self) -> Path:
        """Where the container runs' markers live: ``$PEERS_CONTAINER_DIR``, else
        ``containers/`` beside the work log (one cell's: no marker outlives it)."""
        given = self._env.get("PEERS_CONTAINER_DIR", "")
        return Path(given) if given else self.log.path.parent / "containers"

    def start(self, client_import: str | None = None) -> None:
        """The start-up (module doc): wait for this job run's container, import the
        system's client module (its real cost), then the CUDA sleep if this process has
        not paid it yet."""
        t0 = self._clock()
        key = container_key(self._env)
        self._record(Event.START, curve=self.curve.index, pid=os.getpid(),
                     container=key or "")
        cold = self._process.needs_cuda()
        if key is None:      # outside Slurm: the process is its own container run
            container = self.spec.container_part_s if cold else 0.0
            if container:
                self._sleep(container)
            up = self._clock() if container else 0.0
        else:
            container, up = join_container(self.container_dir(), key,
                                           self.spec.container_part_s, self._sleep,
                                           self._clock)
        if client_import:
            importlib.import_module(client_import)
        cuda = self._process.pay_cuda(self.spec.cuda_s, self._clock(), not_before=up)
        if cuda:
            self._sleep(cuda)
        self._record(Event.READY, seconds=self._clock() - t0, container_s=container,
                     cuda_s=cuda)

    def train_step(self) -> None:
        """Execute the next step: a sleep of its recorded seconds (x ``time_scale``)."""
        if self.done:
            raise ValueError(f"trial {self.trial}: all {self.curve.steps} steps are done")
        seconds = self.curve.step_s[self.step] * self.spec.time_scale
        self._sleep(seconds)
        self.step += 1
        self._record(Event.STEP, seconds=seconds)

    def validate(self) -> float:
        """The recorded validation loss after the current step."""
        if self.step == 0:
            raise ValueError(f"trial {self.trial}: nothing trained to validate")
        self._sleep(self.curve.val_s * self.spec.time_scale)
        loss = self.curve.loss[self.step - 1]
        self._record(Event.VALIDATE, loss=loss)
        return loss

    def save(self, directory: Path) -> str:
        """Write the state (``directory/STATE_FILE``, atomically) after the save sleep;
        return the checkpoint's id."""
        ckpt = uuid.uuid4().hex[:12]
        self._sleep(self.spec.save_s)
        directory.mkdir(parents=True, exist_ok=True)
        state = {"trial": self.trial, "curve": self.curve.index, "step": self.step,
                 "ckpt": ckpt,
                 "weights": base64.b64encode(os.urandom(self.spec.state_bytes)).decode()}
        tmp = directory / f".{STATE_FILE}.{self.run}.tmp"
        with tmp.open("w") as fh:
            json.dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / STATE_FILE)
        self._record(Event.SAVE, ckpt=ckpt)
        return ckpt

    def restore(self, directory: Path) -> int:
        """Read the state ``save`` wrote there after the load sleep; return its step."""
        self._sleep(self.spec.load_s)
        state = json.loads((directory / STATE_FILE).read_text())
        if state["trial"] != self.trial or state["curve"] != self.curve.index:
            raise ValueError(f"{directory / STATE_FILE} holds trial {state['trial']} "
                             f"(curve {state['curve']}), not {self.trial} "
                             f"(curve {self.curve.index})")
        self.step = int(state["step"])
        self._record(Event.LOAD, ckpt=state["ckpt"])
        return self.step

    def end(self, reason: EndReason) -> None:
        self._record(Event.END, reason=reason.value)
