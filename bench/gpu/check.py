"""GPU paths on a machine with CUDA (run through the device tool; never in CI).

Owns: one run of the checks below, each in its own process with its own timeout,
written to ``--out`` as JSON (``bench/results/gpu_check.json``):

* ``info``: torch, CUDA, the GPU.
* ``fork``: the pool's warm start with CUDA. A process preloads ``torch`` and
  ``dethpc.core`` as a pool worker does (no CUDA initialised), then forks two trials
  with ``dethpc.launch.worker.forkserver.spawn`` that each run a matrix product on the GPU;
  then the parent initialises CUDA itself and forks a third (what docs/worker-pool.md
  warns against: it must fail).
* ``asha_per_job`` / ``asha_pool``: ``examples/digits/adaptive.yaml`` (unchanged, and
  with ``slurm.workers: true``) submitted with the dethpc CLI on the local backend, the
  daemon started by ``submit`` as a user's would be; the trials train on the GPU
  (the Trainer picks ``cuda``), promotions restore their checkpoints there. Recorded:
  the end state, trials, wall time, the device of a checkpoint's tensors and whether
  its saved RNG state holds CUDA's.
* ``ddp``: ``examples/digits/const.yaml`` with ``resources.slots_per_trial: 2`` under
  ``python3 -m dethpc.launch.torch_distributed`` on the local backend, on one GPU.

Must not: be imported by dethpc or the tests.

Run (device): ``PYTHONPATH=$PWD python3 bench/gpu/check.py --out $OUT/gpu_check.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"

CUDA_TRIAL = """\
import torch, dethpc.core
x = torch.randn(2048, 2048, device="cuda")
print("child on", torch.cuda.get_device_name(0), float((x @ x).sum()), flush=True)
"""


def info() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "available": torch.cuda.is_available(), "python": sys.version}
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name(0)
        out["count"] = torch.cuda.device_count()
    return out


def fork(tmp: Path) -> dict[str, Any]:
    from dethpc.launch.worker import forkserver

    t0 = time.perf_counter()
    took, missing = forkserver.preload(["torch", "dethpc.core"])
    preload_s = time.perf_counter() - t0
    script = tmp / "cuda_trial.py"
    script.write_text(CUDA_TRIAL)
    env = dict(os.environ)

    def child(n: int) -> dict[str, Any]:
        log = tmp / f"child{n}.log"
        t = time.perf_counter()
        pid, started = forkserver.spawn(["python3", str(script)], env, str(tmp), log)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        return {"code": code, "fork_to_exit_s": round(time.perf_counter() - t, 3),
                "fork_to_code_s": round(started, 4),
                "log_tail": log.read_text()[-400:] if log.exists() else ""}

    import torch

    warm = [child(1), child(2)]
    initialised_before = torch.cuda.is_initialized()
    torch.zeros(1, device="cuda")            # the parent initialises CUDA: unsafe to fork
    after_init = child(3)
    return {"preload_s": round(preload_s, 3), "preloaded": took, "missing": missing,
            "cuda_initialised_in_parent_before": initialised_before,
            "warm_children": warm, "child_after_parent_cuda_init": after_init,
            "ok": all(c["code"] == 0 for c in warm) and not initialised_before}


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def experiment(tmp: Path, name: str, config: Path, overrides: list[str],
               timeout: float) -> dict[str, Any]:
    home = tmp / name
    home.mkdir()
    env = {**os.environ, "DETHPC_HOME": str(home)}
    env.pop("DETHPC_CLUSTER_CONFIG", None)
    t0 = time.perf_counter()
    args = ["submit", str(config), str(DIGITS), "--json"]
    for o in overrides:
        args += ["--config", o]
    sub = _cli(env, *args)
    out: dict[str, Any] = {"overrides": overrides, "submit_rc": sub.returncode}
    if sub.returncode != 0:
        out["submit_err"] = (sub.stdout + sub.stderr)[-1500:]
        return out
    exp = json.loads(sub.stdout)["id"]
    wait = _cli(env, "experiment", "wait", str(exp), timeout=timeout)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["wait_rc"] = wait.returncode
    desc = _cli(env, "experiment", "describe", str(exp), "--json")
    try:
        d = json.loads(desc.stdout)
    except json.JSONDecodeError:
        d = {"raw": (desc.stdout + desc.stderr)[-1500:]}
    out["state"] = d.get("state")
    trials = d.get("trials", [])
    out["trials"] = len(trials)
    out["trial_states"] = sorted({str(t.get("state")) for t in trials})
    out["describe_keys"] = sorted(d)[:30]
    _cli(env, "daemon", "stop")
    runs = home / "runs"
    logs = list(runs.rglob("*.out")) + list(runs.rglob("*.log"))
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    out["pool_worker_scripts"] = len(list(runs.rglob("workers-*.sbatch")))
    out["dist_init"] = [ln[-120:] for ln in text.splitlines()
                        if "torch.distributed initialized" in ln][:4]
    out["tracebacks"] = text.count("Traceback")
    if out["tracebacks"]:
        at = text.find("Traceback")
        out["first_traceback"] = text[at:at + 2500]
    out.update(_checkpoint_device(list(home.rglob("*.pt")) + list(home.rglob("*.pth"))))
    return out


def _checkpoint_device(files: list[Path]) -> dict[str, Any]:
    import torch

    devices: set[str] = set()
    rng_cuda = False
    for f in files[:20]:
        try:
            obj = torch.load(f, map_location=None, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - recorded, the check goes on
            devices.add(f"unreadable: {exc!s:.80}")
            continue
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, torch.Tensor):
                devices.add(o.device.type)
            elif isinstance(o, dict):
                if "cuda" in o and isinstance(o["cuda"], list):
                    rng_cuda = True
                stack.extend(o.values())
            elif isinstance(o, (list, tuple)):
                stack.extend(o)
    return {"checkpoint_files": len(files), "checkpoint_tensor_devices": sorted(devices),
            "checkpoint_has_cuda_rng": rng_cuda}


def run_in_child(check: str, tmp: Path, timeout: float) -> dict[str, Any]:
    """Each check in a fresh process: a CUDA initialised by one cannot leak into another."""
    out = tmp / f"{check}.json"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--only", check, "--tmp", str(tmp),
                               "--out", str(out)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return {"error": f"timed out after {timeout:.0f} s",
                "tail": str(exc.stdout or "")[-1500:]}
    if not out.exists():
        return {"error": f"exit {proc.returncode}", "tail": (proc.stdout + proc.stderr)[-3000:]}
    result: dict[str, Any] = json.loads(out.read_text())
    result["check_s"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default=None)
    ap.add_argument("--tmp", type=Path, default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    args = ap.parse_args()
    if args.only:
        tmp = args.tmp / args.only
        tmp.mkdir(parents=True, exist_ok=True)
        if args.only == "info":
            res = info()
        elif args.only == "fork":
            res = fork(tmp)
        elif args.only == "asha_per_job":
            res = experiment(tmp, "home", DIGITS / "adaptive.yaml", [], 180)
        elif args.only == "asha_pool":
            res = experiment(tmp, "home", DIGITS / "adaptive.yaml",
                             ["slurm.workers=true"], 180)
        elif args.only == "ddp":
            res = experiment(tmp, "home", DIGITS / "const.yaml", [
                "resources.slots_per_trial=2",
                "entrypoint=python3 -m dethpc.launch.torch_distributed -- python3 train.py"],
                130)
        else:
            raise SystemExit(f"unknown check {args.only!r}")
        args.out.write_text(json.dumps(res, indent=1, default=str))
        return 0
    result: dict[str, Any] = {"time": int(time.time()), "host": os.uname().nodename}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for check, timeout in (("info", 60), ("fork", 120), ("asha_per_job", 200),
                               ("asha_pool", 200), ("ddp", 150)):
            if check in args.skip:
                continue
            result[check] = run_in_child(check, Path(tmp), timeout)
            print(check, json.dumps(result[check])[:600], flush=True)
            args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
