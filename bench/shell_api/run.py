"""Cost of one shell-level job API call (``dethpc should-stop`` and friends), the
thing a bash training loop pays at every step, against the floor of any command.

In one run, ``--calls`` rounds (default 30); each round runs every variant once, in
turn (interleaved, so load drift on a shared host hits all of them alike), and times
the whole process from fork to exit with ``time.perf_counter``:

- ``bin_true``: ``/bin/true`` (the floor of starting any process)
- ``python_pass``: ``python -c pass`` (the floor of starting this Python)
- ``cli_version``: ``dethpc --version`` (the full typer CLI)
- ``should_stop``: ``dethpc should-stop`` (answers no; nothing written)
- ``should_stop_shim``: ``python -m dethpc.surfaces.entry should-stop`` (what the run's
  ``bin/dethpc`` shim runs in a wrapped job)
- ``report_metrics``: ``dethpc report metrics --step 1 loss=0.5``
- ``hparams_env``: ``dethpc hparams --env`` (three hyperparameters)
- ``report_checkpoint``: ``dethpc report checkpoint <1 MB file>`` (hard-linked)
- ``report_checkpoint_copy``: the same with ``--copy``

``dethpc`` is the console script next to this Python (``.venv/bin/dethpc``). The trial
directory is a temporary one (``DETHPC_TRIAL_DIR``), on the same filesystem as the
checkpoint file. Medians and p90s, ratios to the three floors, and the number of
modules each kind of call imports go to ``bench/results/shell_api.json``.

Usage: python bench/shell_api/run.py [--calls 30] [--out bench/results/shell_api.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLOORS = ("bin_true", "python_pass", "cli_version")


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr.decode()}")
    return elapsed


def modules_imported(argv: list[str], env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env,
                          capture_output=True, text=True, check=False)
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:")) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" /
                        "shell_api.json")
    args = parser.parse_args()
    dethpc = str(Path(sys.executable).parent / "dethpc")
    if not Path(dethpc).exists():
        raise SystemExit(f"{dethpc} is missing: pip install -e . (the console script)")
    with tempfile.TemporaryDirectory(prefix="dethpc-shell-api-") as tmp:
        trial = Path(tmp) / "trial"
        trial.mkdir()
        (trial / "hparams.json").write_text(json.dumps(
            {"lr": 0.01, "optimizer": {"name": "adam"}, "layers": [64, 64]}))
        blob = Path(tmp) / "model.bin"
        blob.write_bytes(os.urandom(1 << 20))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("DETHPC_", "SLURM_"))}
        env.update({"DETHPC_TRIAL_DIR": str(trial), "PYTHONPATH": str(REPO)})
        variants = {
            "bin_true": ["/bin/true"],
            "python_pass": [sys.executable, "-c", "pass"],
            "cli_version": [dethpc, "--version"],
            "should_stop": [dethpc, "should-stop"],
            "should_stop_shim": [sys.executable, "-m", "dethpc.surfaces.entry", "should-stop"],
            "report_metrics": [dethpc, "report", "metrics", "--step", "1", "loss=0.5"],
            "hparams_env": [dethpc, "hparams", "--env"],
            "report_checkpoint": [dethpc, "report", "checkpoint", str(blob)],
            "report_checkpoint_copy": [dethpc, "report", "checkpoint", str(blob), "--copy"],
        }
        for argv in variants.values():   # warm the page cache and the .pyc files
            timed(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.calls):
            for name, argv in variants.items():
                samples[name].append(timed(argv, env))
        imports = {
            "cli_version": modules_imported([dethpc, "--version"], env),
            "should_stop": modules_imported([dethpc, "should-stop"], env),
            "report_metrics": modules_imported(variants["report_metrics"], env),
            "report_checkpoint": modules_imported(variants["report_checkpoint"], env),
        }
        stored = sum(1 for p in (trial / "checkpoints").iterdir() if not p.name.startswith("."))
    median = {k: round(statistics.median(v) * 1000, 2) for k, v in samples.items()}
    result = {
        "what": "wall ms of one job API call (fork to exit), interleaved rounds",
        "host": f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "calls": args.calls,
        "median_ms": median,
        "p90_ms": {k: round(p90(v) * 1000, 2) for k, v in samples.items()},
        "ratio_of_median": {
            name: {floor: round(median[name] / median[floor], 2) for floor in FLOORS}
            for name in variants if name not in FLOORS},
        "modules_imported": imports,
        "checkpoints_stored": stored,
        "samples_ms": {k: [round(x * 1000, 2) for x in v] for k, v in samples.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    width = max(map(len, variants))
    for name in variants:
        ratios = result["ratio_of_median"].get(name, {})
        extra = "  " + "  ".join(f"x{r} {f}" for f, r in ratios.items()) if ratios else ""
        print(f"{name:<{width}}  median {median[name]:7.2f} ms  "
              f"p90 {result['p90_ms'][name]:7.2f} ms{extra}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
