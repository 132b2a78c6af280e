"""The dashboard's bounds (issue 17 item 3): a page at 10,000 trials, a poller's cost to a tick.

Stores are built by bench/tick_scale's ``synthetic_build`` (the real daemon creates and
submits every trial against a replayed squeue; 30% finished with validations and
checkpoints, 64 running, the rest pending), imported from there, not copied.

* ``page`` — the real dashboard (starlette app, uvicorn) serving that store from a thread
  of this process; the server time to the full JSON response of an experiment page (100
  trials: the page, counts, best trial, curves, checkpoints, events), first, middle and
  last page, 10 requests each, measured as the client's wall time from sending the
  request to the last byte (on loopback); also the data function alone and the HTML page.
* ``tick`` — one process ticks the daemon (as tick_scale measures: every running trial
  reports two more steps before each tick, ``time.process_time`` around ``tick()``), in
  alternating phases without and with a dashboard in another process whose poller
  fetches the experiment list and the experiment's first page every 2 s (what an open
  browser tab does, both views at once: a worst case); 1 s between ticks, so polls land
  during ticks. Reported: median and min tick CPU and wall per phase, the overhead.

Usage: python bench/dashboard/run.py [page|tick|both] [--page-trials 1000 10000]
       [--tick-trials 1000] [--ticks 10]
Writes bench/results/dashboard.json (merging the part it ran into what is there).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "bench" / "results" / "dashboard.json"
GOAL = {"page_s_at_10000": 1.0, "tick_overhead_at_1000": 0.10}
POLL_S = 2.0


def tick_scale() -> Any:
    """bench/tick_scale/run.py as a module (its store builder and tick helpers)."""
    spec = importlib.util.spec_from_file_location(
        "tick_scale_run", REPO / "bench" / "tick_scale" / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def child(*args: str) -> dict[str, Any]:
    """This script's ``_cell`` mode in a fresh process; its last stdout line is JSON."""
    res = subprocess.run([sys.executable, __file__, "_cell", *args], capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"cell {args} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def build(n: int) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f"dethpc-dash-{n}-"))
    ts = tick_scale()
    ts.child("build", str(n), str(work))   # tick_scale's own fresh-process build
    return work


def serve_thread(work: Path) -> tuple[Any, str, str]:
    """The real dashboard over ``work``'s store, served from a thread: (running, base,
    token)."""
    from dethpc.control.experiments import current_user
    from dethpc.store import Store
    from dethpc.surfaces.dashboard.serve import prepare

    # tick_scale's experiments are owned by this Unix user: the dashboard shows them
    running = prepare(Store(f"sqlite:///{work}/db.sqlite"), current_user())
    threading.Thread(target=running.server.run, kwargs={"sockets": [running.sock]},
                     daemon=True).start()
    base = f"http://127.0.0.1:{running.address.port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            fetch(base, "/api/experiments", running.address.token)
            break
        except OSError:
            time.sleep(0.05)
    return running, base, running.address.token


def fetch(base: str, path: str, token: str) -> tuple[float, int]:
    """Wall seconds from request to the response's last byte, and its size."""
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def experiment_id(work: Path) -> int:
    from sqlmodel import select

    from dethpc.store import Store
    from dethpc.store.models import Experiment

    with Store(f"sqlite:///{work}/db.sqlite").session() as s:
        exp_id = s.exec(select(Experiment.id)).first()
    assert exp_id is not None
    return int(exp_id)


# ------------------------------------------------------------------ page
def page_cell(n: int, work: Path) -> dict[str, Any]:
    from dethpc.control.experiments import current_user
    from dethpc.store import Store
    from dethpc.surfaces.dashboard import data

    exp_id = experiment_id(work)
    _, base, token = serve_thread(work)
    pages = max(1, -(-n // data.PER_PAGE))
    out: dict[str, Any] = {"trials": n, "per_page": data.PER_PAGE, "requests_each": 10}
    for label, page in (("first", 1), ("middle", pages // 2 or 1), ("last", pages)):
        times, size = [], 0
        for _ in range(10):
            dt, size = fetch(base, f"/api/experiments/{exp_id}?page={page}", token)
            times.append(dt)
        out[f"page_{label}"] = {"page": page, "median_s": round(statistics.median(times), 4),
                                "max_s": round(max(times), 4), "bytes": size}
    times = [fetch(base, "/", token)[0] for _ in range(10)]
    out["html_median_s"] = round(statistics.median(times), 4)
    times = [fetch(base, "/api/experiments", token)[0] for _ in range(10)]
    out["experiment_list_median_s"] = round(statistics.median(times), 4)
    store = Store(f"sqlite:///{work}/db.sqlite")
    t0 = time.perf_counter()
    for _ in range(10):
        data.experiment_page(store, exp_id, current_user())
    out["data_function_s"] = round((time.perf_counter() - t0) / 10, 4)
    out["worst_s"] = max(out[f"page_{k}"]["max_s"] for k in ("first", "middle", "last"))
    return out


# ------------------------------------------------------------------ tick
def poller_cell(work: Path, seconds: float) -> None:
    """A dashboard and a client polling it every 2 s (another process than the daemon's)."""
    exp_id = experiment_id(work)
    _, base, token = serve_thread(work)
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        a, _ = fetch(base, "/api/experiments", token)
        b, _ = fetch(base, f"/api/experiments/{exp_id}?page=1", token)
        print(f"poll {a + b:.4f}", flush=True)
        time.sleep(max(0.0, POLL_S - (time.monotonic() - t0)))


def tick_cell(n: int, work: Path, ticks: int) -> dict[str, Any]:
    ts = tick_scale()
    from sqlmodel import select

    from dethpc.backends.slurm import SlurmBackend
    from dethpc.common.paths import ExperimentPaths
    from dethpc.control.daemon import Daemon
    from dethpc.store.models import Experiment

    runner = ts.ReplayRunner(timeout=120, model=ts.Model.load(work / "model.json"))
    store = ts.store_at(work)
    daemon = Daemon(store, ts.cluster_at(work), SlurmBackend(runner))
    with store.session() as s:
        exp = s.exec(select(Experiment)).first()
        assert exp is not None
        paths = ExperimentPaths(Path(exp.run_dir))
    running = json.loads((work / "running.json").read_text())
    step = [4]

    def progress() -> None:   # as tick_scale's measure: two more steps per running trial
        for tid in running:
            ts.append(paths.trial(tid).metrics, ts.metric_lines(step[0], step[0] + 1))
        step[0] += 2

    daemon.tick()   # warm-up
    phases: dict[str, dict[str, list[float]]] = {
        "without": {"cpu": [], "wall": []}, "with": {"cpu": [], "wall": []}}
    polls: list[float] = []
    for rnd in range(2):
        for phase in ("without", "with"):
            poller = None
            if phase == "with":
                poller = subprocess.Popen(
                    [sys.executable, __file__, "_poller", str(work),
                     str(ticks * 2.5 + 30)], stdout=subprocess.PIPE, text=True)
                assert poller.stdout is not None
                assert poller.stdout.readline().strip() == "ready"
                time.sleep(POLL_S)
            for _ in range(ticks):
                progress()
                time.sleep(1.0)
                c0, w0 = time.process_time(), time.monotonic()
                daemon.tick()
                phases[phase]["cpu"].append(time.process_time() - c0)
                phases[phase]["wall"].append(time.monotonic() - w0)
            if poller is not None:
                poller.terminate()
                rest, _ = poller.communicate(timeout=30)
                polls += [float(x.split()[1]) for x in rest.splitlines()
                          if x.startswith("poll ")]
        print(f"round {rnd} done", file=sys.stderr, flush=True)

    def summary(xs: list[float]) -> dict[str, Any]:
        return {"median_s": round(statistics.median(xs), 4), "min_s": round(min(xs), 4),
                "all_s": [round(x, 4) for x in xs]}
    out: dict[str, Any] = {"trials": n, "ticks_per_phase": ticks * 2,
                           "poll_every_s": POLL_S, "between_ticks_s": 1.0,
                           "polls_during_with_phases": len(polls),
                           "poll_pair_median_s": round(statistics.median(polls), 4)
                           if polls else None}
    for phase, d in phases.items():
        out[f"{phase}_poller"] = {"cpu": summary(d["cpu"]), "wall": summary(d["wall"])}
    for kind in ("cpu", "wall"):
        a = statistics.median(phases["without"][kind])
        b = statistics.median(phases["with"][kind])
        out[f"{kind}_overhead"] = round((b - a) / a, 4)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_cell":
        mode, n, work = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
        extra = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        result = page_cell(n, work) if mode == "page" else tick_cell(n, work, extra)
        print(json.dumps(result))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_poller":
        poller_cell(Path(sys.argv[2]), float(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("part", nargs="?", default="both", choices=["page", "tick", "both"])
    ap.add_argument("--page-trials", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--tick-trials", type=int, nargs="+", default=[1000])
    ap.add_argument("--ticks", type=int, default=10, help="ticks per phase per round")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    path = Path(args.out)
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    doc.update({"benchmark": "dashboard", "host": platform.node(), "time": time.time(),
                "goal": GOAL, "python": platform.python_version(), "commit": commit,
                "cpus": os.cpu_count(), "load_avg_at_start": list(os.getloadavg())})
    built: dict[int, Path] = {}
    if args.part in ("page", "both"):
        doc["page"] = []
        doc["page_commit"], doc["page_load_avg_at_start"] = commit, list(os.getloadavg())
        for n in args.page_trials:
            built[n] = built.get(n) or build(n)
            r = child("page", str(n), str(built[n]))
            print(json.dumps({k: r[k] for k in ("trials", "worst_s", "data_function_s")}),
                  flush=True)
            doc["page"].append(r)
    if args.part in ("tick", "both"):
        doc["tick"] = []
        doc["tick_commit"], doc["tick_load_avg_at_start"] = commit, list(os.getloadavg())
        for n in args.tick_trials:
            built[n] = built.get(n) or build(n)
            r = child("tick", str(n), str(built[n]), str(args.ticks))
            print(json.dumps({k: r[k] for k in ("trials", "cpu_overhead", "wall_overhead")}),
                  flush=True)
            doc["tick"].append(r)
    doc["load_avg_at_end"] = list(os.getloadavg())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
