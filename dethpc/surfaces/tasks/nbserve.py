"""The notebook task's process: JupyterLab on a free port of the job's node.

Owns: ``python -m dethpc.surfaces.tasks.nbserve`` (run by a ``dethpc notebook start`` job's
script): resolve the node's address (``$SLURMD_NODENAME``, else the host name), pick a
free port there, write ``endpoint.json`` (node, address, port) atomically into the task
directory, then exec ``jupyter lab --no-browser`` bound to that address and port, rooted
at the job's working directory (the context copy), with the token read by Jupyter itself
from the 0600 file ``$JUPYTER_TOKEN_FILE`` (never on a command line: other users read
``/proc/*/cmdline``) and idle shutdown by jupyter_server's own settings
(``ServerApp.shutdown_no_activity_timeout``, checked once a minute; idle kernels and
terminals culled after the same time). It never opens the store.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

ENDPOINT = "endpoint.json"
TOKEN = "token"  # noqa: S105 - the file name, not a secret
#: how often (s) idle kernels and terminals are looked at (jupyter_server's own check of
#: the whole server is once a minute and cannot be changed)
CULL_INTERVAL_S = 60


def node_address(env: dict[str, str] | None = None) -> tuple[str, str]:
    """(node name, IPv4 address) of the node this runs on."""
    env = dict(os.environ) if env is None else env
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    try:
        return node, socket.gethostbyname(node)
    except OSError:
        host = socket.gethostname()
        return node, socket.gethostbyname(host)


def free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def jupyter_argv(python: str, *, address: str, port: int, root: Path,
                 idle_timeout_s: int) -> list[str]:
    """``jupyter lab`` bound to ``address:port``, rooted at ``root``; with an idle timeout
    (0: never) the server stops after that long without kernels, terminals or requests,
    and idle kernels and terminals are culled after it too."""
    argv = [python, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={address}",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}", "--ServerApp.allow_remote_access=True"]
    if os.geteuid() == 0:   # jupyter refuses root unless told (the dev cluster's tests)
        argv.append("--allow-root")
    if idle_timeout_s > 0:
        argv += [f"--ServerApp.shutdown_no_activity_timeout={idle_timeout_s}",
                 f"--MappingKernelManager.cull_idle_timeout={idle_timeout_s}",
                 f"--MappingKernelManager.cull_interval={CULL_INTERVAL_S}",
                 "--MappingKernelManager.cull_connected=True",
                 f"--TerminalManager.cull_inactive_timeout={idle_timeout_s}",
                 f"--TerminalManager.cull_interval={CULL_INTERVAL_S}"]
    return argv


def write_endpoint(task_dir: Path, node: str, address: str, port: int) -> Path:
    path = task_dir / ENDPOINT
    tmp = path.with_name(ENDPOINT + ".tmp")
    tmp.write_text(json.dumps({"host": node, "address": address, "port": port}))
    tmp.chmod(0o600)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dethpc.surfaces.tasks.nbserve")
    p.add_argument("--task-dir", required=True, type=Path)
    p.add_argument("--idle-timeout", type=int, default=0, help="seconds (0: never)")
    a = p.parse_args(argv)
    token = a.task_dir / TOKEN
    if not token.is_file():
        print(f"nbserve: no token file {token}", file=sys.stderr)
        return 2
    node, address = node_address()
    port = free_port(address)
    args = jupyter_argv(sys.executable, address=address, port=port, root=Path.cwd(),
                        idle_timeout_s=a.idle_timeout)
    os.environ["JUPYTER_TOKEN_FILE"] = str(token)
    # its server file (which holds the token) and cookie secret stay in the task's 0700
    # directory, not in ~/.local/share/jupyter/runtime
    os.environ["JUPYTER_RUNTIME_DIR"] = str(a.task_dir / "jupyter-runtime")
    os.environ.pop("JUPYTER_TOKEN", None)
    write_endpoint(a.task_dir, node, address, port)
    print(f"nbserve: JupyterLab on {node} ({address}:{port})", file=sys.stderr, flush=True)
    os.execv(args[0], args)  # noqa: S606 - argv built here, no shell
    return 1  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
