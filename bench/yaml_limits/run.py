"""What refusing a YAML bomb costs (docs/config.md, "YAML limits"; issue 47 item 6).

Two measurements, in one run:

- in process: each refused document of ``CASES`` parsed by ``load_yaml_text`` (the
  users' reader), ``--calls`` times (default 5): median wall time and the peak of
  Python allocations (``tracemalloc``) of one parse; and the same for ``parse_stored``
  (the daemon's reader) on the bombs;
- whole process: ``dethpc render bomb.yaml <context>`` with the 8-levels-of-9 bomb in
  ``data:``, as a new user would type it: wall time, maximum resident memory (of the
  child, ``getrusage``) and the exit code; ``--before PATH`` runs the same with another
  checkout's console script too (the commit before the bounds, for the "before" figures).

Results go to ``bench/results/yaml_limits.json`` (or ``--out``).

Usage: python bench/yaml_limits/run.py [--calls 5] [--before PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HEAD = "name: t\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def laughs(levels: int, width: int, *, mapping: bool = False) -> str:
    lines = ["data:", "  l0: &l0 lol"]
    for i in range(1, levels + 1):
        refs = [f"*l{i - 1}"] * width
        body = ("{" + ", ".join(f"k{j}: {r}" for j, r in enumerate(refs)) + "}" if mapping
                else "[" + ", ".join(refs) + "]")
        lines.append(f"  l{i}: &l{i} {body}")
    return HEAD + "\n".join(lines) + "\n"


def merges(levels: int, width: int) -> str:
    lines = ["data:", "  m0: &m0 {a: lol, b: lol, c: lol}"]
    for i in range(1, levels + 1):
        lines.append(f"  m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * width)
                     + f"], own{i}: x}}")
    return HEAD + "\n".join(lines) + "\n"


CASES = {
    "laughs_seq_8x9": laughs(8, 9),
    "laughs_seq_12x9": laughs(12, 9),
    "laughs_map_8x9": laughs(8, 9, mapping=True),
    "merge_keys_8x9": merges(8, 9),
    "aliases_10000": HEAD + "data:\n  x: &x 1\n  l: [" + ", ".join(["*x"] * 10_000) + "]\n",
    "flow_nesting_100000": HEAD + "data: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "recursive_anchor": HEAD + "data: &a [1, *a]\n",
    "scalar_2MiB": HEAD + "data: " + "y" * (2 << 20) + "\n",
}
#: documents just inside the bounds: what an accepted document may cost at most
ACCEPTED = {
    "plain_256KiB": HEAD + "data:\n  grid:\n" + "".join(
        f"  - {{name: layer{i:05d}, lr: 0.001, size: {i:05d}}}\n"
        for i in range(5_500)),
    "aliases_100_to_9500_chars": HEAD + f"data:\n  s: &s {'z' * 9_500}\n  l: ["
    + ", ".join(["*s"] * 100) + "]\n",
}
STORED = ("laughs_seq_8x9", "laughs_map_8x9", "merge_keys_8x9", "recursive_anchor")


def measure(parse: Callable[[str], Any], text: str, calls: int) -> dict[str, Any]:
    from dethpc.common.errors import ConfigError

    times, message = [], ""
    for _ in range(calls):
        start = time.perf_counter()
        try:
            parse(text)
            message = "ACCEPTED"
        except ConfigError as exc:
            message = exc.errors[0].message if exc.errors else str(exc)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    try:
        parse(text)
    except ConfigError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"median_ms": round(statistics.median(times) * 1000, 2),
            "peak_alloc_kib": round(peak / 1024), "text_chars": len(text),
            "refusal": message[:160]}


def accepted(text: str) -> dict[str, Any]:
    """One parse of an accepted document, and one ``json.dumps`` of it (what a
    downstream walker pays once the aliases are written out)."""
    from dethpc.config._yaml import load_yaml_text

    start = time.perf_counter()
    data = load_yaml_text(text, "bench")
    parsed = time.perf_counter() - start
    start = time.perf_counter()
    size = len(json.dumps(data))
    dumped = time.perf_counter() - start
    return {"text_chars": len(text), "parse_ms": round(parsed * 1000, 1),
            "json_dumps_ms": round(dumped * 1000, 1), "json_chars": size}


def whole_process(dethpc: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dethpc-bench-yaml-") as tmp:
        config = Path(tmp) / "bomb.yaml"
        config.write_text(laughs(8, 9).replace(
            "searcher: {name: single, metric: loss}",
            "searcher: {name: single, metric: loss, max_length: {batches: 10}}"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DETHPC_")}
        env["DETHPC_HOME"] = str(Path(tmp) / "home")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([dethpc, "render", str(config), str(REPO / "examples" /
                                                                  "core_api")],
                              env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"command": "dethpc render bomb.yaml examples/core_api (8 levels of 9 aliases)",
            "dethpc": dethpc, "wall_s": round(wall, 2),
            "cpu_s": round(after.ru_utime + after.ru_stime
                           - before.ru_utime - before.ru_stime, 2),
            "max_rss_mib": round(after.ru_maxrss / 1024), "exit_code": done.returncode,
            "stderr_head": done.stderr.strip()[:300]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--before", help="another checkout's dethpc console script")
    parser.add_argument("--out", type=Path,
                        default=REPO / "bench" / "results" / "yaml_limits.json")
    args = parser.parse_args()
    from dethpc.config import parse_stored
    from dethpc.config._yaml import load_yaml_text

    load_before = os.getloadavg()
    user = {name: measure(lambda t: load_yaml_text(t, "bench"), text, args.calls)
            for name, text in CASES.items()}
    stored = {name: measure(parse_stored, CASES[name], args.calls) for name in STORED}
    inside = {name: accepted(text) for name, text in ACCEPTED.items()}
    process = whole_process(str(Path(sys.executable).parent / "dethpc"))
    before = whole_process(args.before) if args.before else None
    result = {
        "what": "cost of refusing YAML bombs: in process (median of --calls, peak "
                "Python allocations) and one whole `dethpc render`",
        "host": f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}",
        "regime": "the shared 2-core dev machine, other engineers' work beside it",
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "python": platform.python_version(),
        "calls": args.calls,
        "users_reader": user,
        "daemons_reader": stored,
        "accepted_at_the_bounds": inside,
        "whole_process": process,
        "whole_process_before": before,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for kind, table in (("user", user), ("stored", stored)):
        for name, row in table.items():
            print(f"{kind:6} {name:22} {row['median_ms']:9.2f} ms  "
                  f"{row['peak_alloc_kib']:8} KiB  {row['refusal'][:60]}")
    for name, row in inside.items():
        print(f"accepted {name}: {row}")
    print(f"render: {process['wall_s']} s, {process['max_rss_mib']} MiB, "
          f"exit {process['exit_code']}")
    if before:
        print(f"render before: {before['wall_s']} s, {before['max_rss_mib']} MiB, "
              f"exit {before['exit_code']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
