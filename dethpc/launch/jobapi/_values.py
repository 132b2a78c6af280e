"""Pure pieces of the job API: argument values, ``DETHPC_HP_*`` names, run numbers,
the should-stop decision.

Owns: ``parse_value`` (JSON, else the string as given), ``parse_pairs``
(``key=value`` words), ``hparam_env`` (the flattening rule shared with the search
wrapper), ``current_run`` and ``stop_reason``.
Must not: read or write files, or read ``os.environ`` (callers pass the mapping).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_HP_PREFIX, ENV_RUN_ID

#: words that mean a non-finite float: written as null, as ``dethpc.core`` writes NaN
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity",
               "-infinity"}


class JobApiError(DethpcError):
    """Bad input to a job API verb, or no trial to act on; exit status 2."""

    exit_code = 2


class StopWhy(enum.Enum):
    """Why ``should-stop`` says yes: the ``why`` of a stop-acks.jsonl line."""

    SIGNAL = "signal"
    STOP = "stop"
    PAUSE = "pause"

    @property
    def word(self) -> str:
        """What ``dethpc should-stop`` prints."""
        return "preempt" if self is StopWhy.SIGNAL else self.value


def parse_value(raw: str) -> Any:
    """``0.5`` -> 0.5, ``true`` -> True, ``null`` -> None, ``[1,2]`` -> [1, 2],
    ``nan``/``inf`` -> float (written as null); anything else stays the string."""
    try:
        return json.loads(raw)
    except ValueError:
        if raw.strip().lower() in _NON_FINITE:
            return float(raw)
        return raw


def parse_pairs(words: Sequence[str], what: str) -> dict[str, Any]:
    """``["loss=0.5", "tag=a b"]`` -> ``{"loss": 0.5, "tag": "a b"}``; a clear error for
    a word without ``=``, an empty name or a name given twice."""
    out: dict[str, Any] = {}
    for word in words:
        key, sep, raw = word.partition("=")
        if not sep or not key.strip():
            raise JobApiError(f"{what} {word!r} is not key=value (for example loss=0.25)")
        if key in out:
            raise JobApiError(f"{what} {key!r} is given twice")
        out[key] = parse_value(raw)
    return out


def hparam_env(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``DETHPC_HP_<NAME>`` -> value for each hyperparameter: nested groups joined with
    ``_``, upper case, any character outside ``[A-Za-z0-9_]`` as ``_``; strings as
    they are, other values as JSON (``true``, ``0.01``, ``[1, 2]``)."""
    out: dict[str, str] = {}
    for key, value in hparams.items():
        name = f"{prefix}_{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(hparam_env(value, name))
            continue
        var = ENV_HP_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", name).upper()
        out[var] = value if isinstance(value, str) else json.dumps(value)
    return out


def current_run(env: Mapping[str, str]) -> int:
    """The run number of this job: ``DETHPC_RUN_ID``, else ``SLURM_RESTART_COUNT``, else 0."""
    for name in (ENV_RUN_ID, "SLURM_RESTART_COUNT"):
        raw = env.get(name, "").strip()
        if raw:
            try:
                return int(raw)
            except ValueError:
                raise JobApiError(f"environment variable {name}={raw!r} is not a whole "
                                  "number (the run number of this job)") from None
    return 0


def stop_reason(run: int, signal_record: Any, stop_content: str | None) -> StopWhy | None:
    """Should the job checkpoint and exit now? A signal recorded in this run (the
    wrapper's signal.json with ``run`` equal to ``run``) first, as ``dethpc.core``
    decides, then the daemon's stop file (``pause``, anything else ``stop``)."""
    if isinstance(signal_record, Mapping):
        signal_run = signal_record.get("run")
        if isinstance(signal_run, int) and not isinstance(signal_run, bool) \
                and signal_run == run:
            return StopWhy.SIGNAL
    if stop_content is not None:
        return StopWhy.PAUSE if stop_content.strip().lower() == "pause" else StopWhy.STOP
    return None
