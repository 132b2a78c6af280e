"""The job API's file operations in a trial directory (docs/shell-api.md).

Owns: appending metrics (through ``dethpc.core``'s ``TrainContext``, so the records
are the ones the daemon ingests from Python jobs), storing a file or directory as a
checkpoint (``dethpc.core``'s ``CheckpointContext.store_path``: uuid directory,
checksums, ``metadata.json``, atomic rename, the ``checkpoint`` record), finding the
checkpoint to resume from, answering should-stop (and appending its ack), reading
the hyperparameters.
Must not: move or change the user's files (they are hard-linked or copied), import
the CLI, or touch the store.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dethpc.common.jobenv import ENV_HPARAMS, ENV_HPARAMS_FILE
from dethpc.common.paths import TrialPaths
from dethpc.launch.jobapi._values import JobApiError, StopWhy, current_run, stop_reason

#: key of a checkpoint's metadata naming the file or directory ``report checkpoint``
#: stored (the uuid directory holds it under this name)
PATH_KEY = "dethpc_path"
#: metadata keys the user may not set with ``--meta``
RESERVED_META = frozenset({PATH_KEY, "steps_completed"})
HPARAMS_VARS = (ENV_HPARAMS, ENV_HPARAMS_FILE)


def _checkpoint_dir(trial: Path, env: Mapping[str, str]) -> Path:
    from dethpc.core._info import checkpoint_dir

    return checkpoint_dir(trial, env)


# ------------------------------------------------------------------ metrics
def report_metrics(trial: Path, validation: bool, step: int, metrics: dict[str, Any]) -> None:
    """One ``training`` or ``validation`` record in metrics.jsonl, as TrainContext writes."""
    from dethpc.core._distributed import DistributedContext
    from dethpc.core._train import MetricsWriter, TrainContext

    train = TrainContext(MetricsWriter(TrialPaths(trial).metrics), DistributedContext())
    try:
        if validation:
            train.report_validation_metrics(step, metrics)
        else:
            train.report_training_metrics(step, metrics)
    finally:
        train.close()


def highest_step(metrics_file: Path) -> int:
    """The most steps of any training/validation record in metrics.jsonl (0 if none);
    a broken line (a writer that died mid-line) is skipped, as the daemon skips it."""
    best = 0
    try:
        text = metrics_file.read_text()
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("kind") in ("training", "validation"):
            steps = rec.get("steps")
            if isinstance(steps, int) and not isinstance(steps, bool):
                best = max(best, steps)
    return best


# ------------------------------------------------------------------ checkpoints
def _link_or_copy(src: str, dst: str) -> str:
    """Hard-link ``src`` at ``dst`` (same filesystem), else copy it (data and times)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _copy(src: str, dst: str) -> str:
    shutil.copy2(src, dst)
    return dst


def store_checkpoint(trial: Path, env: Mapping[str, str], source: Path, step: int | None,
                     meta: dict[str, Any], *, copy: bool = False) -> Path:
    """Store ``source`` (a file or a directory) as a checkpoint of the trial; the stored
    path ``<checkpoints>/<uuid>/<name of source>``. Files are hard-linked (copied
    across filesystems, or always with ``copy``); ``source`` is never changed."""
    from dethpc.core._checkpoint import CheckpointContext
    from dethpc.core._distributed import DistributedContext
    from dethpc.core._train import MetricsWriter, TrainContext

    if not source.exists():
        raise JobApiError(f"checkpoint path {str(source)!r} does not exist; give the file "
                          "or directory your script just saved")
    reserved = sorted(RESERVED_META & meta.keys())
    if reserved:
        raise JobApiError(f"--meta {reserved[0]} is reserved (give the step with --step)")
    name = source.name if source.name not in ("", ".", "..") else source.resolve().name
    if not name or name == "metadata.json":
        raise JobApiError(f"checkpoint path {str(source)!r} cannot be stored under its "
                          "own name; give a file or directory with another name")
    steps = highest_step(TrialPaths(trial).metrics) if step is None else step
    dist = DistributedContext()
    train = TrainContext(MetricsWriter(TrialPaths(trial).metrics), dist)
    ctx = CheckpointContext(_checkpoint_dir(trial, env), dist, train)
    put = _copy if copy else _link_or_copy
    try:
        with ctx.store_path({**meta, "steps_completed": steps, PATH_KEY: name}) as (tmp, uuid):
            if source.is_dir():
                shutil.copytree(source, tmp / name, copy_function=put)
            else:
                put(str(source), str(tmp / name))
    finally:
        train.close()
    return ctx.directory / uuid / name


def latest_checkpoint(trial: Path, env: Mapping[str, str]) -> Path | None:
    """What the next run resumes from: the newest verified checkpoint (most steps),
    as ``<uuid dir>/<name>`` for one stored by ``report checkpoint``, else the uuid
    directory (one stored through the Python API); None when there is none."""
    from dethpc.core._checkpoint import CheckpointContext, read_metadata
    from dethpc.core._distributed import DistributedContext

    ctx = CheckpointContext(_checkpoint_dir(trial, env), DistributedContext())
    uuid = ctx.latest()
    if uuid is None:
        return None
    path = ctx.directory / uuid
    name = read_metadata(path).metadata.get(PATH_KEY)
    if isinstance(name, str) and name and "/" not in name and (path / name).exists():
        return path / name
    return path


# ------------------------------------------------------------------ should-stop
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return "stop"  # a stop file that exists but cannot be read still asks to stop


def should_stop(trial: Path, env: Mapping[str, str], now: float | None = None) -> StopWhy | None:
    """The answer of ``dethpc should-stop``; on yes, one ack line appended to
    stop-acks.jsonl: ``{"run": N, "why": "signal|stop|pause", "time": <epoch int>}``."""
    tp = TrialPaths(trial)
    run = current_run(env)
    why = stop_reason(run, _read_json(tp.signal_file), _read_text(tp.stop))
    if why is not None:
        stamp = int(time.time() if now is None else now)
        line = json.dumps({"run": run, "why": why.value, "time": stamp}) + "\n"
        fd = os.open(tp.stop_acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    return why


# ------------------------------------------------------------------ hparams
def read_hparams(trial: Path | None, env: Mapping[str, str]) -> dict[str, Any]:
    """The trial's hyperparameters: ``$DETHPC_HPARAMS`` (search mode), else
    ``$DETHPC_HPARAMS_FILE``, else ``<trial>/hparams.json``; {} when there is none."""
    path: Path | None = None
    for name in HPARAMS_VARS:
        if env.get(name):
            path = Path(env[name])
            break
    if path is None:
        if trial is None:
            return {}
        path = TrialPaths(trial).hparams
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise JobApiError(f"hyperparameters file {path} cannot be read as JSON: {exc}") \
            from None
    if not isinstance(data, dict):
        raise JobApiError(f"hyperparameters file {path} must hold a JSON object, found "
                          f"{type(data).__name__}")
    return data
