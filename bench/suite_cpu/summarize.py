"""Sum a CPU ledger (bench/suite_cpu) by role: the share of the test suite's CPU that the
CLI, the daemon, the job side and pytest itself spent (issue 47 item 4).

``python bench/suite_cpu/summarize.py LEDGER [--label NAME] [--out FILE]`` reads the JSON
lines ``ledger.py`` wrote and, when they are there, ``LEDGER.stat0`` / ``LEDGER.stat1``
(the first line of /proc/stat before and after the pytest run, written by
scripts/test.sh): the machine's whole CPU over the run, every process included (Slurm's
daemons, sshd, compilers). Writes ``bench/results/suite_cpu.json`` (or ``--out``), keyed
by ``--label``, beside the labels already there from the same commit only (a result of
another commit is dropped, never merged).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "suite_cpu.json"


def machine_cpu_s(ledger: Path) -> float | None:
    """User+nice+system+irq+softirq seconds between the two /proc/stat snapshots."""
    try:
        a = ledger.with_name(ledger.name + ".stat0").read_text().split()
        b = ledger.with_name(ledger.name + ".stat1").read_text().split()
    except OSError:
        return None
    busy = (1, 2, 3, 6, 7)  # cpu user nice system idle iowait irq softirq ...
    hz = os.sysconf("SC_CLK_TCK")
    return round(sum(int(b[i]) - int(a[i]) for i in busy) / hz, 1)


#: dethpc's own job-side processes (their CPU is dethpc's part of a job), by module
JOB_SIDE = ("dethpc.launch.run_start", "dethpc.launch.run_end", "dethpc.launch.detenv",
            "dethpc.surfaces.entry", "dethpc.backends.local_supervisor", "dethpc.launch._worker",
            "dethpc.launch.worker", "dethpc.launch.torch_distributed", "dethpc.launch.deepspeed",
            "dethpc.launch.mpi", "dethpc.launch.horovod", "dethpc.launch.hetjob",
            "dethpc.launch.wrap_rank", "dethpc.surfaces.tasks")
#: processes that run a user's training (dethpc's in-process launcher included)
TRAINING = ("dethpc.launch._run_main", "dethpc.pytorch.run", "torch.distributed.run")
CLI = ("dethpc.surfaces.cli.main", "dethpc.cli.main")


def role_of(rec: dict[str, Any]) -> str:
    """A process's role from what it ran (argv, ``__main__``'s module), not from its
    environment: every process a test starts inherits pytest-xdist's variables.
    ``cli`` and ``daemon`` (dethpc's login side), ``job-dethpc`` (dethpc's own job-side
    processes), ``training`` (a user's program, under dethpc's launcher or not),
    ``pytest`` (pytest, its workers, and ``python -c`` snippets), ``other``."""
    argv = [str(a) for a in rec.get("argv") or []]
    module = rec.get("module") or ""
    first = os.path.basename(argv[0]) if argv else ""
    words = [a for a in argv[1:] if not a.startswith("-")][:2]
    if first == "dethpc" or module.startswith(CLI):
        return "daemon" if words == ["daemon", "run"] else "cli"
    if module == "dethpc.common.supervisor":
        return "daemon"
    if module.startswith(JOB_SIDE):
        return "job-dethpc"
    if module.startswith(TRAINING) or (not module and first.endswith(".py")):
        return "training"
    if first == "-c" or module.startswith(("pytest", "xdist")):
        return "pytest"
    return "other"


def summarize(lines: list[dict[str, Any]]) -> dict[str, Any]:
    by_role: dict[str, dict[str, float]] = defaultdict(lambda: {"processes": 0, "cpu_s": 0.0})
    cli_by_command: Counter[str] = Counter()
    cli_cpu_by_command: dict[str, float] = defaultdict(float)
    job_by_module: dict[str, float] = defaultdict(float)
    for rec in lines:
        cpu = float(rec["user_s"]) + float(rec["sys_s"])
        rec = {**rec, "role": role_of(rec)}
        role = by_role[rec["role"]]
        role["processes"] += 1
        role["cpu_s"] += cpu
        if rec["role"] == "cli":
            words = [a for a in rec["argv"][1:] if not a.startswith("-")][:2]
            key = " ".join(words) or "(no command)"
            cli_by_command[key] += 1
            cli_cpu_by_command[key] += cpu
        if rec["role"] in ("job-dethpc", "training"):
            job_by_module[rec.get("module") or os.path.basename(str(rec["argv"][0] or "?"))] += cpu
    total = sum(r["cpu_s"] for r in by_role.values())
    return {
        "processes": len(lines),
        "python_cpu_s": round(total, 1),
        "by_role": {k: {"processes": int(v["processes"]), "cpu_s": round(v["cpu_s"], 1),
                        "share_of_python": round(v["cpu_s"] / total, 3) if total else 0.0,
                        "cpu_s_per_process": round(v["cpu_s"] / v["processes"], 3)}
                    for k, v in sorted(by_role.items())},
        "cli_top_commands": [
            {"command": k, "runs": cli_by_command[k], "cpu_s": round(cli_cpu_by_command[k], 1)}
            for k, _ in sorted(cli_cpu_by_command.items(), key=lambda kv: (-kv[1], kv[0]))[:15]],
        "job_top_modules": [{"module": k, "cpu_s": round(v, 1)} for k, v in
                            sorted(job_by_module.items(), key=lambda kv: -kv[1])[:10]],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledger", type=Path)
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--wall-s", type=float, help="the pytest run's wall seconds")
    args = ap.parse_args()
    lines = [json.loads(x) for x in args.ledger.read_text().splitlines() if x.strip()]
    result = summarize(lines)
    result["machine_cpu_s"] = machine_cpu_s(args.ledger)
    if result["machine_cpu_s"]:
        result["python_share_of_machine"] = round(result["python_cpu_s"]
                                                  / result["machine_cpu_s"], 3)
        for role in result["by_role"].values():
            role["share_of_machine"] = round(role["cpu_s"] / result["machine_cpu_s"], 3)
    result["wall_s"] = args.wall_s
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    doc: dict[str, Any] = {}
    if args.out.exists():
        doc = json.loads(args.out.read_text())
        if doc.get("commit") != commit:
            doc = {}
    doc.update({"commit": commit, "regime": "the whole test suite (scripts/test.sh), "
                "every Python process of the venv that ended normally"})
    doc.setdefault("runs", {})[args.label] = result
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
