"""The dashboard's logic (table-driven) and its HTTP surface on a real server.

Pure parts: page parameters, a log's tail, JSON a browser parses, the printed URL and
``ssh -L`` line. Then the real ``dethpc dashboard`` (uvicorn, in a subprocess) over a
store as the reconciler leaves it (``tests/dashboard_seed.py``): who is let in (no token
401, wrong 403, the URL's token swapped for a cookie), what the endpoints return
(pagination, another user's experiment hidden, ASHA's rungs, NaN as null, clear errors
for bad parameters), and the CLI's messages when the extra is missing or a port is bad.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.store.access import DatabaseRole, Scope
from dethpc.surfaces.dashboard.data import MAX_PER_PAGE, PER_PAGE, Page, log_tail, visible_owner
from dethpc.surfaces.dashboard.serve import Address
from tests.dashboard_seed import LOG_LINES, Dashboard, seed

pytest.importorskip("starlette", reason="needs the dashboard extra: pip install -e '.[dashboard]'")
pytest.importorskip("uvicorn", reason="needs the dashboard extra: pip install -e '.[dashboard]'")


@pytest.mark.parametrize("page,per_page,want", [
    (None, None, (1, PER_PAGE)), ("", "", (1, PER_PAGE)), ("3", "10", (3, 10)),
    ("1", str(MAX_PER_PAGE), (1, MAX_PER_PAGE)),
])
def test_page_parameters(page: str | None, per_page: str | None, want: tuple[int, int]) -> None:
    p = Page.parse(page, per_page)
    assert (p.number, p.size) == want


@pytest.mark.parametrize("page,per_page,words", [
    ("0", None, "page='0' is not allowed: an integer from 1 to"),
    ("x", None, "page='x' is not allowed"),
    ("-2", None, "page='-2'"),
    (None, "0", "per_page='0' is not allowed: an integer from 1 to 500"),
    (None, str(MAX_PER_PAGE + 1), f"per_page='{MAX_PER_PAGE + 1}'"),
    (None, "1.5", "per_page='1.5'"),
])
def test_bad_page_parameters_are_named(page: str | None, per_page: str | None,
                                       words: str) -> None:
    with pytest.raises(DethpcError, match=None) as err:
        Page.parse(page, per_page)
    assert words in str(err.value)


@pytest.mark.parametrize("role,want", [
    (DatabaseRole("", Scope.PRIVATE_DATABASE), "ana"),        # SQLite: the user's own
    (DatabaseRole("ana", Scope.OWN_ROWS), "ana"),             # a shared database's user
    (DatabaseRole("carol", Scope.ALL_ROWS), None),            # a dethpc admin: everyone's
])
def test_whose_experiments(role: DatabaseRole, want: str | None) -> None:
    assert visible_owner(role, "ana") == want


@pytest.mark.parametrize("files,max_bytes,lines,want", [
    ([], 100, 10, ""),
    (["a\nb\nc\n"], 100, 2, "b\nc"),
    (["a\nb\n", "c\nd\n"], 100, 3, "b\nc\nd"),          # files oldest first, taken together
    (["x" * 50 + "\nlast\n"], 10, 10, "xxxx\nlast"),     # only the end is read
    (["old\n", "new1\nnew2\n"], 10, 10, "new1\nnew2"),   # the newest file fills the budget
    (["caf\u00e9\n"], 100, 5, "caf\u00e9"),
])
def test_log_tail(tmp_path: Path, files: list[str], max_bytes: int, lines: int,
                  want: str) -> None:
    paths = []
    for i, text in enumerate(files):
        p = tmp_path / f"slurm-{i}.out"
        p.write_text(text)
        paths.append(p)
    assert log_tail(paths + [tmp_path / "gone.out"], max_bytes, lines) == want


@pytest.mark.parametrize("value,want", [
    (1.5, 1.5), (math.nan, None), (math.inf, None), (-math.inf, None),
    ({"a": [1, math.nan, {"b": math.inf}]}, {"a": [1, None, {"b": None}]}),
    ("NaN", "NaN"), (None, None),
])
def test_json_has_no_nan(value: Any, want: Any) -> None:
    from dethpc.surfaces.dashboard.app import json_response

    assert json.loads(bytes(json_response(value).body)) == want


@pytest.mark.parametrize("host,url,ssh", [
    ("127.0.0.1", "http://127.0.0.1:8123/?token=T", "ssh -N -L 8123:127.0.0.1:8123 u@login1"),
    ("localhost", "http://localhost:8123/?token=T", "ssh -N -L 8123:127.0.0.1:8123 u@login1"),
    ("::1", "http://[::1]:8123/?token=T", "ssh -N -L 8123:[::1]:8123 u@login1"),
    ("10.0.0.5", "http://10.0.0.5:8123/?token=T", "ssh -N -L 8123:10.0.0.5:8123 u@login1"),
])
def test_url_and_ssh_line(host: str, url: str, ssh: str) -> None:
    a = Address(host, 8123, "T")
    assert a.url == url and a.ssh_line("login1", "u") == ssh


# ------------------------------------------------------------------ a real server
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dashboard, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("home")
    ids = {**seed(home), "home": home}
    dash = Dashboard.in_thread(home)
    try:
        yield dash, ids
    finally:
        dash.stop()


@pytest.mark.parametrize("path,how,status", [
    ("/", None, 401), ("/api/experiments", None, 401), ("/static/dashboard.js", None, 401),
    ("/", "wrong-query", 403), ("/api/experiments", "wrong-bearer", 403),
    ("/api/experiments", "wrong-cookie", 403), ("/api/experiments?token=", None, 403),
    ("/", "query", 303), ("/api/experiments", "query", 200), ("/api/experiments", "bearer", 200),
    ("/", "cookie", 200), ("/static/dashboard.js", "cookie", 200),
    ("/api/experiments", "cookie", 200), ("/static/nothing.js", "cookie", 404),
])
def test_who_is_let_in(served: tuple[Dashboard, dict[str, Any]], path: str, how: str | None,
                       status: int) -> None:
    dash, _ = served
    cookie = f"dethpc_dashboard_{dash.base.rsplit(':', 1)[1]}"
    kw: dict[str, str] = {}
    if how == "query":
        path += ("&" if "?" in path else "?") + f"token={dash.token}"
    elif how == "wrong-query":
        path += "?token=nope"
    elif how == "bearer":
        kw["token"] = dash.token
    elif how == "wrong-bearer":
        kw["token"] = "nope"
    elif how == "cookie":
        kw["cookie"] = f"{cookie}={dash.token}"
    elif how == "wrong-cookie":
        kw["cookie"] = f"{cookie}=nope"
    got, headers, body = dash.get(path, **kw)
    assert got == status, body
    assert "default-src 'self'" in headers["content-security-policy"]
    if status in (401, 403):
        assert b"dethpc dashboard" in body and b"finished-sweep" not in body
    if status == 303:   # the token leaves the address bar for an HttpOnly cookie
        assert headers["location"] == "/"
        assert headers["set-cookie"].startswith(f"{cookie}={dash.token};")
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=strict" in headers["set-cookie"]


def test_printed_lines(served: tuple[Dashboard, dict[str, Any]]) -> None:
    dash, _ = served
    port = dash.base.rsplit(":", 1)[1]
    assert dash.url.startswith("http://127.0.0.1:")
    assert dash.ssh_line.startswith(f"ssh -N -L {port}:127.0.0.1:{port} ")
    assert "@" in dash.ssh_line.split()[-1]
    assert len(dash.token) >= 32


def test_experiments_are_the_users_own(served: tuple[Dashboard, dict[str, Any]]) -> None:
    dash, ids = served
    d = dash.json("/api/experiments")
    shown = {e["id"]: e for e in d["experiments"]}
    assert set(shown) == {ids["finished"], ids["running"], ids["asha"]}
    assert d["all_users"] is False
    # no daemon runs: the running and the ASHA experiment are counted, the page says so
    # (test_dashboard_browser)
    assert d["untracked"] == 2
    assert shown[ids["finished"]]["trials"] == {"COMPLETED": 4}
    for path in (f"/api/experiments/{ids['other']}", f"/api/trials/{ids['other_trial']}",
                 "/api/experiments/999", "/api/trials/999"):
        status, _, body = dash.get(path, token=dash.token)
        assert status == 404 and b"does not exist" in body, (path, body)


def test_an_experiment_page(served: tuple[Dashboard, dict[str, Any]]) -> None:
    dash, ids = served
    d = dash.json(f"/api/experiments/{ids['finished']}?page=2&per_page=3")
    assert d["page"] == {"number": 2, "size": 3, "total_trials": 4, "pages": 2}
    assert [t["id"] for t in d["trials"]] == ids["finished_trials"][3:]
    assert d["best_trial"]["id"] == ids["best_trial"] and d["counts"] == {"COMPLETED": 4}
    t = d["trials"][0]
    assert [p[0] for p in t["curve"]] == [10, 20, 30, 40, 50]
    assert t["best_checkpoint"] == f"ck-{t['id']}-50" and t["pending_reason"] is None
    assert d["checkpoints"]["total"] == 20 and len(d["checkpoints"]["recent"]) == 20
    assert d["events"][0]["message"] == "experiment completed <b>no markup</b>"
    assert d["rungs"] == []
    status, _, body = dash.get(f"/api/experiments/{ids['finished']}?per_page=9999",
                               token=dash.token)
    assert status == 400 and b"per_page='9999' is not allowed" in body


def test_rungs_pending_reason_log_and_nan(served: tuple[Dashboard, dict[str, Any]]) -> None:
    dash, ids = served
    rungs = dash.json(f"/api/experiments/{ids['asha']}")["rungs"]
    assert [len(b["rungs"]) for b in rungs] == [3, 2]
    first = rungs[0]["rungs"][0]
    assert first["reached"] == 8 and first["keep"] == 2 and first["cutoff"] is not None
    running = dash.json(f"/api/experiments/{ids['running']}")
    assert running["trials"][0]["pending_reason"] == "QOSMaxJobsPerUserLimit"
    assert running["trials"][0]["best_validation"] is None   # NaN in the store
    t = dash.json(f"/api/trials/{ids['waiting_trial']}")
    assert t["pending_reason"] == "QOSMaxJobsPerUserLimit"
    lines = t["log_tail"].splitlines()
    assert len(lines) == 200 and lines[-1] == f"log line {LOG_LINES - 1}"


def test_the_straggler_of_a_multi_rank_trial(served: tuple[Dashboard, dict[str, Any]]) -> None:
    """Issue 35 item 4: the slowest rank and its node, on the experiment's page, the
    trial's page and in ``experiment describe`` (its JSON and its words)."""
    from dethpc.store import Store
    from dethpc.surfaces import views
    from dethpc.surfaces.cli.experiment_cmd import straggler_text

    dash, ids = served
    want = {"rank": 3, "node": "n2", "run": 0, "busy_s": 0.2, "median_busy_s": 0.1,
            "behind_pct": 100.0, "ranks": 4, "at": 1.0e9}
    rows = {t["id"]: t for t in dash.json(f"/api/experiments/{ids['running']}")["trials"]}
    assert rows[ids["straggling_trial"]]["straggler"] == want
    assert rows[ids["waiting_trial"]]["straggler"] is None       # no ranks reported
    assert dash.json(f"/api/trials/{ids['straggling_trial']}")["straggler"] == want
    store = Store(f"sqlite:///{ids['home'] / 'dethpc.db'}")
    described = views.describe_experiment(store, ids["running"])
    assert [t["straggler"] for t in described["trials"]] == [None, want]
    assert straggler_text(want) == ("rank 3 on n2: 200 ms of its own work per step, 100% "
                                    "over the median (100 ms) of 4 ranks")
    js = dash.get("/static/dashboard.js", token=dash.token)[2].decode()
    assert "slowest rank" in js and "s.behind_pct" in js


@pytest.mark.parametrize("args,block,words", [
    ([], "uvicorn", "pip install 'dethpc[dashboard]'"),
    ([], "starlette", "missing: starlette"),
    (["--port", "70000"], None, "--port 70000 is not allowed: 0 (a free port) to 65535"),
    (["--host", "192.0.2.1"], None, "cannot listen on 192.0.2.1:0"),   # not this machine's
])
def test_cli_says_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str], args: list[str],
                                block: str | None, words: str) -> None:
    from dethpc.surfaces.cli.common import ENV
    from dethpc.surfaces.cli.main import main

    monkeypatch.setenv("DETHPC_HOME", str(tmp_path))
    monkeypatch.delenv("DETHPC_CLUSTER_CONFIG", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(sys, "argv", ["dethpc", "dashboard", *args])
    if block:
        monkeypatch.setitem(sys.modules, block, None)   # as if the extra were not installed
    for name in ("cluster", "store", "backend"):
        ENV.__dict__.pop(name, None)
    try:
        with pytest.raises(SystemExit) as exited:
            main()
    finally:
        for name in ("cluster", "store", "backend"):
            ENV.__dict__.pop(name, None)
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None) and words in " ".join(err.split()), err
    assert "Traceback" not in err


def test_a_snapshot_the_searcher_does_not_take_draws_no_rungs() -> None:
    from dethpc.config import parse_experiment_config
    from dethpc.surfaces.dashboard.data import _rungs
    from tests.dashboard_seed import ASHA

    cfg = parse_experiment_config(ASHA, "asha")
    assert _rungs(cfg, {"brackets": "not a list"}) == []
    assert _rungs(cfg, None) == []
