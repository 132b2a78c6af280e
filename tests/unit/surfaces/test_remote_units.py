"""The pure parts of remote submit (issue 18 item 1): the upload plan, the remote
target's parsing (``--remote`` and ``remote.yaml``), the version rule, finding
``--remote`` and submit's paths in argv, the far command line, and the far side's tree
built from objects (a real file system)."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dethpc.surfaces.remote import forward, upload, versions
from dethpc.surfaces.remote.cli import remote_tree, split_remote, submit_positions
from dethpc.surfaces.remote.target import (
    RemoteError,
    RemoteTarget,
    parse_block,
    parse_destination,
    resolve,
)


@pytest.mark.parametrize(("wanted", "present", "expected"), [
    # nothing there: everything, from 0
    ([("a", "/a", 10), ("b", "/b", 5)], {}, [("a", 0), ("b", 0)]),
    # same content twice: sent once
    ([("a", "/a", 10), ("a", "/a2", 10)], {}, [("a", 0)]),
    # already there with the right size: not sent
    ([("a", "/a", 10), ("b", "/b", 5)], {"a": 10}, [("b", 0)]),
    # there with the wrong size: sent again from the start
    ([("a", "/a", 10)], {"a": 7}, [("a", 0)]),
    # a part: resumed from its size
    ([("a", "/a", 10)], {"a.part": 4}, [("a", 4)]),
    # a complete part (cut before the rename): resumed at its end (only renamed)
    ([("a", "/a", 10)], {"a.part": 10}, [("a", 10)]),
    # an over-long part: from the start
    ([("a", "/a", 10)], {"a.part": 12}, [("a", 0)]),
    # an empty file
    ([("e", "/e", 0)], {}, [("e", 0)]),
    ([("e", "/e", 0)], {"e": 0}, []),
])
def test_upload_plan(wanted: list[tuple[str, str, int]], present: dict[str, int],
                     expected: list[tuple[str, int]]) -> None:
    assert [(s.sha, s.offset) for s in upload.plan(wanted, present)] == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("login", (None, "login", None)),
    ("alice@login.example.org", ("alice", "login.example.org", None)),
    ("alice@10.0.0.1:2222", ("alice", "10.0.0.1", 2222)),
    ("login:22", (None, "login", 22)),
])
def test_destination(text: str, expected: tuple[Any, ...]) -> None:
    assert parse_destination(text) == expected


@pytest.mark.parametrize(("text", "words"), [
    ("a@b@c", "is not a destination"), ("", "is not a destination"),
    ("login:x", "port 'x'"), ("login:70000", "port '70000'"), ("a b", "not a destination"),
])
def test_bad_destination(text: str, words: str) -> None:
    with pytest.raises(RemoteError, match=words):
        parse_destination(text)


@pytest.mark.parametrize(("raw", "expected"), [
    (None, None),
    ({"remote": None}, None),
    ({"remote": {"host": "alice@login"}}, RemoteTarget("login", "alice")),
    ({"remote": {"host": "login:2222", "user": "bob", "command": "/opt/dethpc/bin/dethpc",
                 "area": "/scratch/bob/dethpc"}},
     RemoteTarget("login", "bob", 2222, "/opt/dethpc/bin/dethpc", "/scratch/bob/dethpc")),
    ({"remote": {"host": "login", "port": 2200}}, RemoteTarget("login", None, 2200)),
])
def test_remote_block(raw: Any, expected: RemoteTarget | None) -> None:
    assert parse_block(raw, "remote.yaml") == expected


@pytest.mark.parametrize(("raw", "words"), [
    ({"remote": {"user": "a"}}, "remote.host is missing"),
    ({"remote": {"host": "h", "prot": 1}}, "remote.prot is not a setting"),
    ({"remote": {"host": "h", "port": "22"}}, "remote.port '22' is not a port"),
    ({"remote": {"host": "h", "port": True}}, "remote.port True is not a port"),
    ({"remote": {"host": "h", "command": ""}}, "remote.command '' must be a non-empty"),
    ({"remote": ["h"]}, "remote must be a mapping"),
    ({"other": 1}, "expected one top-level key 'remote'"),
    ([1], "expected one top-level key 'remote'"),
])
def test_bad_remote_block(raw: Any, words: str) -> None:
    with pytest.raises(RemoteError, match=words) as exc:
        parse_block(raw, "remote.yaml")
    assert str(exc.value).startswith("remote.yaml: ") and "\n" not in str(exc.value)


def test_option_overrides_the_file_destination_only() -> None:
    from_file = RemoteTarget("login", "alice", 22, command="/opt/dethpc", area="/scratch/a")
    assert resolve(None, from_file) == from_file
    assert resolve(None, None) is None
    assert resolve("off", from_file) is None
    assert resolve("bob@other:2", from_file) == RemoteTarget("other", "bob", 2, "/opt/dethpc",
                                                             "/scratch/a")
    assert resolve("other", None) == RemoteTarget("other")


@pytest.mark.parametrize(("local", "remote", "ok"), [
    ("0.1.0", "0.1.0\n", True), ("0.1.0+dirty", "0.1.0", True), ("0.1.0", "0.1.1", False),
    ("0.1.0", "0.2.0", False), ("0.1.0", "", False), ("1.0.0", "1.0.0rc1", False),
])
def test_versions(local: str, remote: str, ok: bool) -> None:
    assert versions.compatible(local, remote) is ok
    if not ok:
        with pytest.raises(RemoteError, match=f"{local} here, .* on login"):
            versions.check(local, remote, "login")


@pytest.mark.parametrize(("argv", "value", "rest"), [
    (["experiment", "list"], None, ["experiment", "list"]),
    (["--remote", "a@b", "experiment", "list"], "a@b", ["experiment", "list"]),
    (["--remote=off", "submit", "x"], "off", ["submit", "x"]),
    (["--cluster-config", "c.yaml", "--remote", "h", "logs"], "h",
     ["--cluster-config", "c.yaml", "logs"]),
    # after the command it is the command's own word
    (["submit", "--remote", "h"], None, ["submit", "--remote", "h"]),
])
def test_split_remote(argv: list[str], value: str | None, rest: list[str]) -> None:
    assert split_remote(argv) == (value, rest)


def test_remote_without_value() -> None:
    with pytest.raises(RemoteError, match="--remote needs a value"):
        split_remote(["--remote"])


@pytest.mark.parametrize(("argv", "expected"), [
    (["submit", "exp.yaml", "model"], (1, 2)),
    (["submit", "--config", "a=1", "exp.yaml", "-f", "model"], (3, 5)),
    (["--cluster-config", "c", "experiment", "create", "-c", "x=2", "e.yaml", "m", "--json"],
     (6, 7)),
    (["e", "create", "e.yaml", "m"], (2, 3)),
    (["experiment", "list"], None),
    (["submit", "only.yaml"], None),
    (["logs", "1"], None),
])
def test_submit_positions(argv: list[str], expected: tuple[int, int] | None) -> None:
    assert submit_positions(argv) == expected


def test_command_line_quotes_and_runs_the_command() -> None:
    """The far shell's line: words quoted, the exit status kept while the input stays
    open; closing the input (Ctrl-C here, a dropped connection) ends the command."""

    def run(line: str, close_after_s: float | None = None) -> tuple[int, str]:
        proc = subprocess.Popen(line, shell=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        if close_after_s is not None:
            time.sleep(close_after_s)
            proc.stdin.close()
        out = proc.stdout.read()  # the input stays open until the command ends
        code = proc.wait(timeout=30)
        proc.stdin.close()
        return code, out

    assert run(forward.command_line("printf '%s|'", ["a b", "$HOME", "it's"])) == \
        (0, "a b|$HOME|it's|")
    assert run(forward.command_line(
        shlex.join([sys.executable, "-c", "raise SystemExit(7)"]), []))[0] == 7
    start = time.monotonic()
    assert run(forward.command_line("sleep", ["60"]), close_after_s=0.2)[0] == 143
    assert time.monotonic() - start < 20
    with pytest.raises(RemoteError, match="remote.command is empty"):
        forward.command_line("  ", [])


def test_far_side_builds_the_tree_from_objects(tmp_path: Path) -> None:
    area = tmp_path / "area"
    (area / "objects").mkdir(parents=True)
    ctx = tmp_path / "ctx"
    (ctx / "pkg").mkdir(parents=True)
    (ctx / "train.py").write_text("print(1)\n")
    (ctx / "pkg" / "same.py").write_text("print(1)\n")  # same content: one object
    (ctx / "run.sh").write_text("#!/bin/sh\n")
    (ctx / "run.sh").chmod(0o755)
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("name: x\n")
    files = upload.local_files(ctx)
    for f in files:
        (area / "objects" / f.sha).write_bytes((ctx / f.rel).read_bytes())
        (area / "objects" / f.sha).chmod(0o644)
    sha = upload.sha256_file(cfg)
    (area / "objects" / sha).write_bytes(cfg.read_bytes())
    doc = upload.manifest(files, cfg.name, sha)
    doc_sha = hashlib.sha256(doc).hexdigest()
    (area / "objects" / doc_sha).write_bytes(doc)
    context, config = upload.build_tree(area, doc_sha)
    assert config.read_text() == "name: x\n" and config.name == "exp.yaml"
    assert sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()) == \
        ["pkg/same.py", "run.sh", "train.py"]
    assert (context / "run.sh").stat().st_mode & 0o111
    assert (context / "train.py").stat().st_ino == (area / "objects" / files[2].sha).stat().st_ino
    assert upload.build_tree(area, doc_sha) == (context, config)  # reused
    bad = json.dumps({"config": ["c", sha], "context": {"../x": [sha, False]}}).encode()
    bad_sha = hashlib.sha256(bad).hexdigest()
    (area / "objects" / bad_sha).write_bytes(bad)
    ran: list[list[str]] = []
    remote_tree(str(area), doc_sha, ["2", "3", "--json", "submit", "CFG", "CTX", "-f"],
                lambda args, prog_name: ran.append(args))
    assert ran == [["--json", "submit", str(config), str(context), "-f"]]
    with pytest.raises(RemoteError, match="expected CONFIG_POS CONTEXT_POS"):
        remote_tree(str(area), doc_sha, ["x", "3", "submit"], lambda **_: None)
    with pytest.raises(RemoteError, match="leaves the tree"):
        upload.build_tree(area, bad_sha)
    with pytest.raises(RemoteError, match="missing or unreadable"):
        upload.build_tree(area, "0" * 64)


def test_ctrl_c_only_sets_a_flag_while_output_is_copied() -> None:
    """SIGINT during `forward.run` raises nothing (a KeyboardInterrupt inside paramiko
    could leave a channel lock held); it sets the flag the copy loop reads, and the
    previous handler is back afterwards."""
    import os
    import signal

    from dethpc.surfaces.remote.forward import _interrupt_flag

    before = signal.getsignal(signal.SIGINT)
    with _interrupt_flag() as interrupted:
        assert not interrupted.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while not interrupted.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert interrupted.is_set()
    assert signal.getsignal(signal.SIGINT) is before


class _ClosingChannel:
    """A channel whose exit status and close land between the copy loop's two checks:
    the far command has printed everything, exited, and the far side closed the channel
    (what the jump-host run in CI hit once)."""

    closed = True

    def __init__(self) -> None:
        self.asked = 0

    def recv_ready(self) -> bool:
        return False

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        self.asked += 1
        return self.asked > 1  # not ready at the first check, ready right after

    def get_transport(self) -> None:
        return None

    def recv_exit_status(self) -> int:
        return 0


def test_a_channel_closed_with_its_exit_status_is_not_a_lost_connection() -> None:
    import io
    import threading

    ch = _ClosingChannel()
    code = forward._pump(ch, io.BytesIO(), io.BytesIO(),  # type: ignore[arg-type]
                         threading.Event())
    assert code == 0


def test_a_channel_closed_without_an_exit_status_is_a_lost_connection() -> None:
    import io
    import threading

    ch = _ClosingChannel()
    ch.asked = -10**6  # never ready
    with pytest.raises(RemoteError, match="connection to the login node was lost"):
        forward._pump(ch, io.BytesIO(), io.BytesIO(),  # type: ignore[arg-type]
                      threading.Event())
