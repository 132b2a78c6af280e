"""The daemon's own cost per trial (issue 47 item 2): a worker-pool search of N toy trials
run to its end by an in-process ``Daemon`` (lease held, as ``dethpc daemon run`` holds it)
on the local backend, with the store's work counted by SQLAlchemy events hooked here, in
the bench, never in the product.

Measured in this process (the daemon's; the pool's workers and trials are other
processes): CPU seconds (``time.process_time``) from the first tick to the experiment's
end, ticks and fast ticks, store sessions (``Session`` transactions begun), commits,
SQL statements, peak RSS (the wall inside SQLite's COMMIT is the profile's
``commit of sqlite3.Connection``); ``--profile`` writes a
cProfile of the whole run (top entries by own time).

Usage: python bench/daemon_cost/run.py [--trials 32 128] [--repeat 1] [--profile]
       [--journal wal|delete] [--synchronous normal|full] [--out PATH]
       [--trees LABEL=PATH ...] [--backends sqlite postgres]
``--trees``: before/after in one run -- each cell imports dethpc from one of these trees
(a ``git archive`` of a commit), the trees alternating cell by cell. ``--backends``:
the store on SQLite (a file in the cell's directory) and/or a throwaway PostgreSQL
(``tests/pg/pgserver.py``: a new database per cell).
(``--journal``/``--synchronous`` override what the store chooses, through
``DETHPC_SQLITE_JOURNAL``/``DETHPC_SQLITE_SYNCHRONOUS``, for the settings comparison).
Writes bench/results/daemon_cost.json (one entry per configuration, merged by label).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
#: the dethpc a cell imports: this checkout, or (``--trees``) another commit's archive
TREE = Path(os.environ.get("COST_TREE") or REPO)
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(TREE))

from sqlalchemy import event  # noqa: E402
from sqlalchemy.orm import Session as OrmSession  # noqa: E402

from bench.pgserver import pgserver  # noqa: E402

TOY = REPO / "tests" / "fixtures" / "toy"
OUT = REPO / "bench" / "results" / "daemon_cost.json"
GOAL = {"cpu_s_per_trial_at_128": 0.01}


#: ``--shape long``: trials as users run them, longer, reporting training metrics every
#: batch and validating seldom (200 batches of 0.05 s, a validation every 50): what the
#: between-ticks pass sees most is training lines (the default ``short``: 10 batches, a
#: validation every 5)
SHAPES = {"short": (10, 5), "long": (200, 50)}
SHAPE = os.environ.get("COST_SHAPE", "short")


def experiment(n: int) -> dict[str, Any]:
    batches, every = SHAPES[SHAPE]
    return {"name": f"cost-{n}", "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 6},
                                "step_time": 0.05},
            "searcher": {"name": "random", "metric": "validation_loss", "max_trials": n,
                         "max_concurrent_trials": 4, "max_length": {"batches": batches}},
            "min_validation_period": {"batches": every},
            "reproducibility": {"experiment_seed": 7},
            "slurm": {"workers": {"preload": ["dethpc.core"], "heartbeat_s": 1,
                                  "lease_timeout_s": 60}}}


#: ``COST_SITES=1``: count sessions by the dethpc function that opened them, split into
#: those that wrote and those that only read (the bench's own stack walk, slow)
SITES = os.environ.get("COST_SITES") == "1"


def _site() -> str:
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if "/dethpc/" in name and "site-packages" not in name \
                and not name.endswith(("store/store.py", "contextlib.py")):
            return f"{name.split('/dethpc/', 1)[1]}:{f.f_code.co_name}"
        f = f.f_back  # type: ignore[assignment]
    return "?"


class Counts:
    def __init__(self) -> None:
        self.sessions = self.commits = self.statements = 0
        self.sites: dict[str, dict[str, int]] = {"write": {}, "read": {}}
        self.stmt_sites: dict[str, int] = {}

    def hook(self, engine: Any) -> None:
        event.listen(OrmSession, "after_begin", self._begin)
        event.listen(OrmSession, "before_flush", self._flush)
        event.listen(OrmSession, "after_commit", self._end)
        event.listen(engine, "before_cursor_execute", self._stmt)
        event.listen(engine, "commit", self._commit)

    def _begin(self, session: Any, *_a: Any) -> None:
        self.sessions += 1
        if SITES:
            session.info["bench_site"] = _site()

    def _flush(self, session: Any, *_a: Any) -> None:
        if SITES and session.new | session.dirty | session.deleted:
            session.info["bench_wrote"] = True

    def _end(self, session: Any) -> None:
        if SITES and "bench_site" in session.info:
            site = session.info.pop("bench_site")
            key = "write" if session.info.pop("bench_wrote", False) else "read"
            self.sites[key][site] = self.sites[key].get(site, 0) + 1

    def _stmt(self, *_a: Any) -> None:
        self.statements += 1
        if SITES:
            site = _site()
            self.stmt_sites[site] = self.stmt_sites.get(site, 0) + 1

    def _commit(self, *_a: Any) -> None:
        self.commits += 1


def measure(n: int, profile: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"dethpc-cost-{n}-"))
    home = work / "home"
    home.mkdir()
    # the daemon's default pacing (tick_min_s 0.5, tick_max_s 10: results still wake it)
    cluster_yaml = {"backend": "local", "runs_root": str(home / "runs"),
                    "local_max_concurrent": 4}
    (home / "cluster.yaml").write_text(yaml.safe_dump(cluster_yaml))
    os.environ["DETHPC_HOME"] = str(home)
    os.environ["DETHPC_CLUSTER_CONFIG"] = str(home / "cluster.yaml")

    from dethpc.backends.factory import make_backend
    from dethpc.config import load_experiment_config
    from dethpc.config.cluster import load_cluster_config
    from dethpc.control import experiments
    from dethpc.control.daemon import Daemon
    from dethpc.control.daemon.shared import TickStats
    from dethpc.control.lease import Lease
    from dethpc.store import Store
    from dethpc.store.models import Experiment

    cluster = load_cluster_config(home / "cluster.yaml")
    store = Store(os.environ.get("COST_DB_URL") or f"sqlite:///{home / 'dethpc.db'}")
    backend = make_backend(cluster)
    cfg = work / "exp.yaml"
    cfg.write_text(yaml.safe_dump(experiment(n)))
    exp_id = experiments.create_experiment(store, cluster, load_experiment_config(cfg), TOY,
                                           backend)
    lease = Lease(store, "bench", ttl_s=cluster.daemon_lease_s)
    assert lease.acquire()
    daemon = Daemon(store, cluster, backend, lease=lease, owner=None)
    counts = Counts()
    counts.hook(store.engine)
    ticks = [0, 0]
    real_tick, real_fast = daemon.tick, daemon.fast_tick

    def tick() -> TickStats:
        ticks[0] += 1
        return real_tick()

    def fast(grown: dict[int, set[int]]) -> bool:
        ticks[1] += 1
        return real_fast(grown)

    daemon.tick, daemon.fast_tick = tick, fast  # type: ignore[method-assign]
    try:   # the collector as `dethpc daemon run` sets it before its loop (from bcd771d)
        from dethpc.control.daemon.heap import settle
    except ImportError:
        gc_mode = "default"
    else:
        settle()
        gc_mode = "settled"
    memo = getattr(daemon.reconciling, "memo", None)   # the searcher kept (from ced663b)
    # a CPU timer: the daemon's own CPU, not its waits (the fsync inside SQLite's COMMIT,
    # the pacing's sleeps), is what the bench measures
    prof = cProfile.Profile(time.process_time) if profile else None
    c0, w0 = time.process_time(), time.monotonic()
    if prof:
        prof.enable()
    daemon.run(until_idle=True)
    if prof:
        prof.disable()
    cpu, wall = time.process_time() - c0, time.monotonic() - w0
    with store.session() as s:
        exp = s.get(Experiment, exp_id)
        state = exp.state.value if exp else "?"
    lease.release()
    out: dict[str, Any] = {
        "trials": n, "state": state, "daemon_cpu_s": round(cpu, 3),
        "cpu_s_per_trial": round(cpu / n, 4), "wall_s": round(wall, 1),
        "ticks": ticks[0], "fast_ticks": ticks[1], "sessions": counts.sessions,
        "commits": counts.commits, "statements": counts.statements,
        "commits_per_tick": round(counts.commits / max(1, ticks[0] + ticks[1]), 2),
        "sessions_per_trial": round(counts.sessions / n, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "journal": os.environ.get("DETHPC_SQLITE_JOURNAL", "(store's choice)"),
        "synchronous": os.environ.get("DETHPC_SQLITE_SYNCHRONOUS", "(store's choice)"),
        "gc": gc_mode,
    }
    if memo is not None:
        out["searcher_memo"] = {"hits": memo.hits, "misses": memo.misses}
    out["backend"] = store.engine.dialect.name
    out["dethpc"] = str(Path(sys.modules["dethpc"].__file__ or "").parent.parent)
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as c:
            out["journal_mode_used"] = c.exec_driver_sql("PRAGMA journal_mode").scalar()
            out["synchronous_used"] = c.exec_driver_sql("PRAGMA synchronous").scalar()
    store.engine.dispose()
    if SITES:
        out["session_sites"] = {k: dict(sorted(v.items(), key=lambda kv: -kv[1]))
                                for k, v in counts.sites.items()}
        out["statement_sites"] = dict(sorted(counts.stmt_sites.items(),
                                             key=lambda kv: -kv[1]))
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(os.environ.get("COST_SORT", "tottime")
                                                  ).print_stats(35)
        (work / "profile.txt").write_text(buf.getvalue())
        prof.dump_stats(str(work / "daemon.prof"))
        print(buf.getvalue(), file=sys.stderr)
        out["profile"] = str(work / "profile.txt")
    return out


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over the cells of each (backend, trials, tree)."""
    import statistics
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("backend", "sqlite"), r["trials"], r["tree"]), []).append(r)
    out = []
    for (backend, n, tree), cs in groups.items():
        med = {k: statistics.median(c[k] for c in cs)
               for k in ("daemon_cpu_s", "cpu_s_per_trial", "ticks", "fast_ticks",
                         "sessions", "commits", "statements")}
        out.append({"backend": backend, "trials": n, "tree": tree, "cells": len(cs),
                    "daemon_cpu_s_cells": [c["daemon_cpu_s"] for c in cs],
                    "fast_ticks_cells": [c["fast_ticks"] for c in cs],
                    **{f"{k}_median": v for k, v in med.items()},
                    "load_avg_1m_cells": [c["load_avg_1m"] for c in cs]})
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_cell":
        print(json.dumps(measure(int(sys.argv[2]), sys.argv[3] == "1")))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--journal", default=None)
    ap.add_argument("--synchronous", default=None)
    ap.add_argument("--label", default=None)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--trees", nargs="+", default=[], metavar="LABEL=PATH",
                    help="before/after in one run: each cell imports dethpc from one of "
                         "these trees (git archives), alternating")
    ap.add_argument("--backends", nargs="+", default=["sqlite"],
                    choices=["sqlite", "postgres"])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="short",
                    help="the trials' length and validation period (SHAPES)")
    args = ap.parse_args()
    env = dict(os.environ, COST_SHAPE=args.shape)
    if args.journal:
        env["DETHPC_SQLITE_JOURNAL"] = args.journal
    if args.synchronous:
        env["DETHPC_SQLITE_SYNCHRONOUS"] = args.synchronous
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    trees = {label: Path(path).resolve() for label, path in
             (t.split("=", 1) for t in args.trees)} or {"this": REPO}
    pg = None
    if "postgres" in args.backends:
        pg = pgserver().PgServer()   # tests/pg's server, by its path (bench/pgserver.py)
        pg.start()
    rows = []
    cell = 0
    try:
        for backend in args.backends:
            for n in args.trials:
                for _ in range(args.repeat):
                    for tree_label, tree in trees.items():   # interleaved, cell by cell
                        cell += 1
                        cenv = dict(env, COST_TREE=str(tree))
                        if backend == "postgres":
                            assert pg is not None
                            pg.create(f"cost{cell}")
                            cenv["COST_DB_URL"] = pg.url(f"cost{cell}")
                        load = os.getloadavg()[0]
                        res = subprocess.run([sys.executable, __file__, "_cell", str(n),
                                              "1" if args.profile else "0"],
                                             capture_output=True, text=True, env=cenv,
                                             check=False)
                        if res.returncode != 0:
                            raise SystemExit(f"cell {n} failed:\n{res.stderr[-4000:]}")
                        if args.profile:
                            print(res.stderr[-8000:], file=sys.stderr)
                        row = json.loads(res.stdout.strip().splitlines()[-1])
                        row.update(tree=tree_label, load_avg_1m_before=round(load, 2),
                                   load_avg_1m=round(os.getloadavg()[0], 2))
                        print(json.dumps({k: v for k, v in row.items() if k != "profile"}),
                              flush=True)
                        rows.append(row)
    finally:
        if pg is not None:
            pg.stop()
    label = args.label or commit
    path = Path(args.out)
    doc: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    doc.update({"benchmark": "daemon_cost", "host": platform.node(), "cpus": os.cpu_count(),
                "python": platform.python_version(), "goal": GOAL})
    doc.setdefault("runs", {})[label] = {"commit": commit, "time": time.time(),
                                         "shape": {"name": args.shape,
                                                   "batches_validate_every":
                                                   SHAPES[args.shape]},
                                         "trees": {k: str(v) for k, v in trees.items()},
                                         "summary": summary(rows), "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
