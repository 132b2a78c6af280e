"""The glue the ``dethpc`` command calls before parsing: when a remote target is set
(``--remote`` before the command, or the user-level ``remote.yaml``), the whole call
runs on the login node over one SSH connection.

Owns: finding ``--remote`` among the global options, rewriting ``submit``'s config and
context arguments to the uploaded tree, the version check, and the hidden far-side
command ``remote-tree`` (builds an uploaded tree, then runs the submit that names it).
Must not: open the store.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dethpc.common.version import __version__
from dethpc.surfaces.remote.target import RemoteError, RemoteTarget, load_file, resolve

if TYPE_CHECKING:  # paramiko is imported only when a call goes remote
    from dethpc.surfaces.remote import ssh, upload

GLOBAL_VALUE_OPTIONS = ("--cluster-config",)
# experiment create's options that take a value (the rest are flags)
CREATE_VALUE_OPTIONS = ("--config", "-c")


def split_remote(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--remote X`` / ``--remote=X`` among the global options (before the command):
    (its value or None, argv without it)."""
    rest: list[str] = []
    value: str | None = None
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            return value, rest + argv[i:]
        if word == "--remote":
            if i + 1 >= len(argv):
                raise RemoteError("--remote needs a value: [user@]host[:port] or 'off'")
            value = argv[i + 1]
            i += 2
            continue
        if word.startswith("--remote="):
            value = word.split("=", 1)[1]
            i += 1
            continue
        rest.append(word)
        if word in GLOBAL_VALUE_OPTIONS and i + 1 < len(argv):
            rest.append(argv[i + 1])
            i += 1
        i += 1
    return value, rest


def submit_positions(argv: list[str]) -> tuple[int, int] | None:
    """Where ``submit``'s (or ``experiment create``'s) config and context arguments are
    in ``argv`` (global options first), or None for any other command."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in GLOBAL_VALUE_OPTIONS else 1
    if i < len(argv) and argv[i] == "submit":
        i += 1
    elif i + 1 < len(argv) and argv[i] in ("experiment", "e") and argv[i + 1] == "create":
        i += 2
    else:
        return None
    found: list[int] = []
    while i < len(argv) and len(found) < 2:
        word = argv[i]
        if word == "--":
            found += list(range(i + 1, min(len(argv), i + 3 - len(found))))
            break
        if word.startswith("-"):
            i += 2 if word in CREATE_VALUE_OPTIONS else 1
            continue
        found.append(i)
        i += 1
    return (found[0], found[1]) if len(found) == 2 else None


def maybe_forward(argv: list[str]) -> int | None:
    """Run the call remotely when a target is set: the exit status; None to run here."""
    option, rest = split_remote(argv)
    target = resolve(option, load_file())
    if target is None or (rest[:1] == ["--version"]):
        return None
    return run_remote(target, rest)


def run_remote(target: RemoteTarget, argv: list[str],
               progress: upload.Progress | None = None) -> int:
    from dethpc.surfaces.remote import forward, ssh, versions

    conn = ssh.connect(target)
    try:
        where = f"{conn.label}"
        code, out, err = forward.capture(conn.transport,
                                         forward.command_line(target.command, ["--version"]))
        if code != 0:
            raise RemoteError(f"`{target.command} --version` failed on {where} (exit {code}: "
                              f"{(err or out).strip().splitlines()[-1:] or ''}); set "
                              "remote.command to how dethpc runs there")
        versions.check(__version__, out, where)
        positions = submit_positions(argv)
        if positions is not None:
            argv = _upload_for_submit(conn, target, argv, positions, progress)
        return forward.run(conn.transport, forward.command_line(target.command, argv))
    finally:
        conn.close()


def _upload_for_submit(conn: ssh.Connection, target: RemoteTarget, argv: list[str],
                       positions: tuple[int, int],
                       progress: upload.Progress | None) -> list[str]:
    from dethpc.surfaces.remote import upload

    config_file, context = Path(argv[positions[0]]), Path(argv[positions[1]])
    if not config_file.is_file():
        raise RemoteError(f"config file {config_file} does not exist (on this workstation)")
    sftp = conn.transport.open_sftp_client()
    if sftp is None:
        raise RemoteError(f"{conn.label} offers no SFTP subsystem")
    try:
        area = sftp.normalize(".") + "/" + target.area if not target.area.startswith("/") \
            else target.area
        manifest_sha, report = upload.upload_tree(sftp, area, context, config_file, progress)
    finally:
        sftp.close()
    print(f"uploaded {len(report.sent) + len(report.resumed)} files "
          f"({report.bytes_sent / 1024:.1f} KiB; {len(report.resumed)} resumed), "
          f"{report.present} already on the login node", file=sys.stderr)
    # one far process builds the tree and runs the submit that names it
    return ["remote-tree", area, manifest_sha, str(positions[0]), str(positions[1]), *argv]


def remote_tree(area: str, manifest_sha: str, rest: list[str],
                app: Callable[..., Any]) -> None:
    """The far side of an upload (hidden command): build the tree; with ``rest``
    (``CONFIG_POS CONTEXT_POS ARGV...``) run ``ARGV`` through ``app`` (the CLI's typer
    app, handed in by ``dethpc.surfaces.cli.main``) with the tree's config and context
    at those positions, else print the tree's paths as JSON."""
    from dethpc.surfaces.remote import upload

    context, config = upload.build_tree(Path(area), manifest_sha)
    if not rest:
        print(json.dumps({"context": str(context), "config": str(config)}))
        return
    try:
        pos = int(rest[0]), int(rest[1])
        argv = rest[2:]
        argv[pos[0]], argv[pos[1]] = str(config), str(context)
    except (ValueError, IndexError):
        raise RemoteError(f"remote-tree: expected CONFIG_POS CONTEXT_POS ARGV..., got "
                          f"{rest[:3]}") from None
    app(args=argv, prog_name="dethpc")
