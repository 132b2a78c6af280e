"""The version check made before any remote command: the workstation's and the login
node's dethpc must be the same release.

Owns: comparing two version strings (pure). A local build tag (``+...``) is ignored,
everything else must match exactly: the CLI's words and the store's schema move
together, so a looser rule would let a new client drive an old daemon.
"""

from __future__ import annotations

from dethpc.surfaces.remote.target import RemoteError


def release(version: str) -> str:
    return version.strip().split("+", 1)[0]


def compatible(local: str, remote: str) -> bool:
    return bool(release(remote)) and release(local) == release(remote)


def check(local: str, remote: str, where: str) -> None:
    if not compatible(local, remote):
        shown = remote.strip() or "(no version printed)"
        raise RemoteError(f"dethpc versions differ: {local} here, {shown} on {where}; "
                          "install the same release on both")
