"""Where a remote call goes: ``--remote [user@]host[:port]`` and the ``remote:`` block of
the user-level config (``$XDG_CONFIG_HOME/dethpc/remote.yaml``, default
``~/.config/dethpc/remote.yaml``; ``DETHPC_REMOTE_CONFIG`` names another file).

Owns: parsing both into a ``RemoteTarget`` and the one-line errors for bad values.
Pure apart from reading the file. Must not: connect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.surfaces.remote.location import remote_file

OFF = ("off", "none", "local")
KEYS = ("host", "user", "port", "command", "area", "ssh_config", "known_hosts",
        "identity_file")
DEFAULT_AREA = ".dethpc/remote"  # relative: under the login node's home directory


class RemoteError(DethpcError):
    """A remote call could not be made (connection, authentication, versions, upload)."""


@dataclass(frozen=True)
class RemoteTarget:
    host: str
    user: str | None = None
    port: int | None = None
    command: str = "dethpc"
    area: str = DEFAULT_AREA
    ssh_config: str = "~/.ssh/config"
    known_hosts: str = "~/.ssh/known_hosts"
    identity_file: str | None = None


_DEST = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>[^@\s:/]+)(?::(?P<port>[^:]*))?$")


def parse_destination(text: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` -> (user, host, port)."""
    m = _DEST.match(text.strip())
    if not m:
        raise RemoteError(f"--remote: {text!r} is not a destination; expected "
                          "[user@]host[:port] (or 'off')")
    port = m.group("port")
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise RemoteError(f"--remote: port {port!r} in {text!r} is not a port number "
                          "(1-65535)")
    return m.group("user"), m.group("host"), int(port) if port else None


def config_path() -> Path:
    return Path(remote_file())


def parse_block(raw: Any, where: str) -> RemoteTarget | None:
    """The ``remote:`` block of a parsed YAML document (``None`` when absent)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"remote"}:
        raise RemoteError(f"{where}: expected one top-level key 'remote' (a mapping), "
                          f"found {sorted(raw) if isinstance(raw, dict) else type(raw).__name__}")
    block = raw["remote"]
    if block is None:
        return None
    if not isinstance(block, dict):
        raise RemoteError(f"{where}: remote must be a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(block) - set(KEYS))
    if unknown:
        raise RemoteError(f"{where}: remote.{unknown[0]} is not a setting; allowed: "
                          f"{', '.join(KEYS)}")
    if "host" not in block:
        raise RemoteError(f"{where}: remote.host is missing ([user@]host[:port] or an "
                          "ssh_config Host alias)")
    values: dict[str, Any] = {}
    for key in KEYS:
        if key not in block or block[key] is None:
            continue
        value = block[key]
        if key == "port":
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
                raise RemoteError(f"{where}: remote.port {value!r} is not a port number "
                                  "(1-65535)")
        elif not isinstance(value, str) or not value.strip():
            raise RemoteError(f"{where}: remote.{key} {value!r} must be a non-empty string")
        values[key] = value
    user, host, port = parse_destination(values.pop("host"))
    values.setdefault("user", user)
    values["port"] = values.get("port", port)
    return RemoteTarget(host=host, **values)


def load_file(path: Path | None = None) -> RemoteTarget | None:
    path = path or config_path()
    if not path.is_file():
        return None
    from dethpc.common.errors import ConfigError
    from dethpc.config._yaml import load_yaml_text

    try:
        raw = load_yaml_text(path.read_text(), str(path))
    except ConfigError as exc:
        raise RemoteError(f"{path}: not valid YAML ({exc.errors[0].message})") from None
    return parse_block(raw, str(path))


def resolve(option: str | None, from_file: RemoteTarget | None) -> RemoteTarget | None:
    """The target of this call: ``--remote`` overrides the file's destination (its other
    settings stay); ``--remote off`` runs locally whatever the file says."""
    if option is None:
        return from_file
    if option.strip().lower() in OFF:
        return None
    user, host, port = parse_destination(option)
    if from_file is None:
        return RemoteTarget(host=host, user=user, port=port)
    return replace(from_file, host=host, user=user, port=port)
