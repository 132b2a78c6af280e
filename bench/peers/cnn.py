"""The one training every system of bench/peers runs, and the records it leaves.

Owns: ``Trainer`` -- curve ``i`` of ``bench/asha/curves_cnn.json`` (its recorded
hyperparameters: a small CNN on scikit-learn's digits as 1x8x8) trained **for real**,
one CPU thread, batch by batch from batch 0 or from a saved state (model, optimizer,
data order: a resumed run continues exactly where it stopped), validated every
``EVERY`` batches; ``record`` -- one line ``{"t", "system", "trial", "curve",
"length", "loss"}`` appended to the run's ``records.jsonl`` (``$PEERS_RECORDS``) at
each validation, from which the driver reads the time to target; ``work`` -- every
batch trained, validation and clean end of a run as one line of ``records.work.jsonl``
(beside the records; ``Trainer.train_to(..., work=(system, trial))``), from which
``workcount.count_work`` counts the work executed, redone and lost exactly, the same
way for every system (issue 48, item 7); ``target_loss`` -- the target fixed before the
runs (a quantile of the recorded final losses at the budget).
Must not: know which system calls it (each passes its own name and trial id).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ASHA = REPO / "bench" / "asha"      # curves.py: the recorded model, data and evaluation
CURVES = ASHA / "curves_cnn.json"
EVERY = 32          # batches between validations, every system alike
#: batches of a trial trained to the end (ASHA's max_length); run.py's --budget sets it
#: for every system's processes through $PEERS_BUDGET (a length the curves recorded)
BUDGET = int(os.environ.get("PEERS_BUDGET", "512"))
N_CURVES = 128


def hparams(curve: int) -> dict[str, Any]:
    raw = json.loads(CURVES.read_text())
    return dict(raw["curves"][curve]["hparams"])


def target_loss(quantile: float = 0.10, budget: int = BUDGET) -> float:
    """The ``quantile`` of the recorded losses of all curves at ``budget`` batches."""
    raw = json.loads(CURVES.read_text())
    finals = sorted(c["val_loss"][c["lengths"].index(budget)] for c in raw["curves"])
    return finals[int(quantile * (len(finals) - 1))]


def draws(seed: int, n: int) -> list[int]:
    """The curves a random search of seed ``seed`` draws, in order: what dethpc's
    searcher draws for ``experiment_seed: seed`` (checked against its trials), what
    submitit's and Hydra's scripts draw, and what Optuna and Ray are given first."""
    import random
    rng = random.Random(seed)
    return [rng.randrange(N_CURVES) for _ in range(n)]


def record(system: str, trial: str, curve: int, length: int, loss: float) -> None:
    path = os.environ.get("PEERS_RECORDS")
    if not path:
        return
    line = json.dumps({"t": time.time(), "system": system, "trial": trial, "curve": curve,
                       "length": length, "loss": loss}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())      # one write: whole lines from many processes
    finally:
        os.close(fd)


def work_path() -> str | None:
    """The work log beside ``$PEERS_RECORDS`` (None: not recording)."""
    path = os.environ.get("PEERS_RECORDS")
    return str(Path(path).with_suffix(".work.jsonl")) if path else None


class WorkLog:
    """Appends one run's work events: ``start`` (the batch it starts from), each
    ``batch`` trained, each ``validate`` and its clean ``end``; a run killed (node
    crash, SIGKILL) leaves no ``end``. One ``write`` a line, so lines from many
    processes stay whole; the file is opened once a run."""

    def __init__(self, system: str, trial: str, path: str | None = None) -> None:
        self.system, self.trial = system, trial
        path = path or work_path()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) \
            if path else None

    def event(self, event: str, batch: int) -> None:
        if self.fd is None:
            return
        os.write(self.fd, (json.dumps({"t": round(time.time(), 3), "trial": self.trial,
                                       "system": self.system, "event": event,
                                       "batch": batch}) + "\n").encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Trainer:
    """Curve ``curve``'s CNN, trained as bench/asha/curves.py recorded it."""

    def __init__(self, curve: int, state: bytes | None = None) -> None:
        import torch
        if str(ASHA) not in sys.path:       # once per process, however many trials
            sys.path.insert(0, str(ASHA))
        from curves import build, evaluate, load_data

        torch.set_num_threads(1)
        self.torch, self._evaluate = torch, evaluate
        self.curve, self.hp = curve, hparams(curve)
        self.xtr, self.ytr, self.xva, self.yva = load_data(0, "digits")
        torch.manual_seed(curve)          # curves.py's seed of curve i (--seed 0): i
        self.gen = torch.Generator().manual_seed(curve)
        self.model = build(self.hp)
        opt_cls = torch.optim.Adam if self.hp["optimizer"] == "adam" else torch.optim.SGD
        self.opt = opt_cls(self.model.parameters(), lr=self.hp["lr"],
                           weight_decay=self.hp["weight_decay"])
        self.perm = torch.randperm(len(self.xtr), generator=self.gen)
        self.pos, self.batch = 0, 0
        if state is not None:
            self.load(state)

    def save(self) -> bytes:
        buf = io.BytesIO()
        self.torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                         "gen": self.gen.get_state(), "perm": self.perm, "pos": self.pos,
                         "batch": self.batch}, buf)
        return buf.getvalue()

    def load(self, state: bytes) -> None:
        s = self.torch.load(io.BytesIO(state), weights_only=False)
        self.model.load_state_dict(s["model"])
        self.opt.load_state_dict(s["opt"])
        self.gen.set_state(s["gen"])
        self.perm, self.pos, self.batch = s["perm"], s["pos"], s["batch"]

    def train_to(self, length: int,
                 on_validation: Callable[[int, float], bool] | None = None,
                 work: tuple[str, str] | None = None) -> float:
        """Train to ``length`` batches, validating every ``EVERY``; ``on_validation``
        returning False stops early. Returns the last validation loss. ``work``:
        ``(system, trial)``: every batch, validation and the clean end logged
        (``WorkLog``)."""
        log = WorkLog(*work) if work else None
        if log:
            log.event("start", self.batch)
        try:
            loss_v = self._train(length, on_validation, log)
            if log:
                log.event("end", self.batch)
        finally:
            if log:
                log.close()
        return loss_v

    def _train(self, length: int, on_validation: Callable[[int, float], bool] | None,
               log: WorkLog | None) -> float:
        torch, nn = self.torch, self.torch.nn
        loss_v = float("nan")
        bs = self.hp["batch_size"]
        while self.batch < length:
            if self.pos + bs > len(self.xtr):
                self.perm, self.pos = torch.randperm(len(self.xtr), generator=self.gen), 0
            idx = self.perm[self.pos:self.pos + bs]
            self.pos += bs
            loss = nn.functional.cross_entropy(self.model(self.xtr[idx]), self.ytr[idx])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.batch += 1
            if log:
                log.event("batch", self.batch)
            if self.batch % EVERY == 0 or self.batch == length:
                loss_v = self._evaluate(self.model, self.xva, self.yva)
                if log:
                    log.event("validate", self.batch)
                if on_validation is not None and on_validation(self.batch, loss_v) is False:
                    break
        return loss_v
