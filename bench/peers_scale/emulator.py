"""The trial every system of the peers-at-scale benchmark runs (issue 48): sleeping work
that replays a recorded learning curve, so 64-128 "GPUs" fit on 2 cores.

Owns: ``ReplayCurve`` and ``load_curves`` (bench/asha's ``curves_cnn_long.json``: 128
small CNNs on digits, 64 points of 128 batches each, with the seconds each took and the
validation loss after each), ``EmulatorSpec`` (start-up, checkpoint and time-scale costs)
and ``TrialEmulator``, one run of one trial: ``start`` (the system's own client import,
then a sleep standing for CUDA and container start, 10 s by default), ``restore`` (a
sleep, then a real small state file read), ``train_step`` (a sleep of the recorded step's
seconds x ``time_scale``), ``validate`` (the recorded loss after the step), ``save`` (a
sleep, then a real state file written atomically) and ``end``; every one of them logged
(``worklog``), so that redone and lost work is counted exactly afterwards.
Must not: decide when to validate, checkpoint or stop (the system under test does), or
talk to Slurm.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
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

    #: after the client import: CUDA init, container start, data loading
    startup_s: float = 10.0
    #: multiplies every recorded step and validation time (1.0: as recorded, ~1 s a step)
    time_scale: float = 1.0
    save_s: float = 2.0
    load_s: float = 2.0
    #: the state file's payload (a real file: storage traffic is part of the cost)
    state_bytes: int = 4096

    def __post_init__(self) -> None:
        for name in ("startup_s", "save_s", "load_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: {getattr(self, name)} must be >= 0")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale: {self.time_scale} must be > 0")
        if self.state_bytes < 0:
            raise ValueError(f"state_bytes: {self.state_bytes} must be >= 0")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> EmulatorSpec:
        """The spec a runner passed to a trial's process (``PEERS_STARTUP_S``,
        ``PEERS_TIME_SCALE``, ``PEERS_SAVE_S``, ``PEERS_LOAD_S``; the defaults otherwise)."""
        return cls(startup_s=float(env.get("PEERS_STARTUP_S", "10")),
                   time_scale=float(env.get("PEERS_TIME_SCALE", "1")),
                   save_s=float(env.get("PEERS_SAVE_S", "2")),
                   load_s=float(env.get("PEERS_LOAD_S", "2")))


class TrialEmulator:
    """One run of trial ``trial`` replaying ``curve``; each action sleeps and is logged to
    ``log`` under this run's id (``run``, default a fresh one)."""

    def __init__(self, trial: str, curve: ReplayCurve, log: WorkLog,
                 spec: EmulatorSpec | None = None, run: str | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        self.trial, self.curve, self.log = trial, curve, log
        self.spec = spec or EmulatorSpec()
        self.run = run or uuid.uuid4().hex[:12]
        self._sleep, self._clock = sleep, clock
        self.step = 0

    def _record(self, event: Event, **extra: object) -> None:
        self.log.write({"trial": self.trial, "run": self.run, "event": event.value,
                        "step": self.step, "wall": self._clock(), **extra})

    @property
    def done(self) -> bool:
        return self.step >= self.curve.steps

    def start(self, client_import: str | None = None) -> None:
        """Import the system's client module (its real cost), then the start-up sleep."""
        t0 = self._clock()
        self._record(Event.START, curve=self.curve.index, pid=os.getpid())
        if client_import:
            importlib.import_module(client_import)
        self._sleep(self.spec.startup_s)
        self._record(Event.READY, seconds=self._clock() - t0)

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
