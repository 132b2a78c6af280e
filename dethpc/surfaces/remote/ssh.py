"""The SSH connection seam: one paramiko ``Transport`` per CLI call.

Owns: reading ``~/.ssh/config`` (HostName, User, Port, IdentityFile, ProxyJump,
ProxyCommand, UserKnownHostsFile), hopping through jump hosts (each a direct-tcpip
channel of the previous hop), checking the host key against known_hosts (an unknown
or different key is refused), and authenticating with the agent, the key files, then
keyboard-interactive/password (asked on the terminal, once per hop and call). Every
failure becomes a one-line ``RemoteError``.
Must not: know what runs on the far side.
"""

from __future__ import annotations

import getpass
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from dethpc.surfaces.remote.target import RemoteError, RemoteTarget, parse_destination

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Hop:
    """One resolved SSH destination."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: tuple[str, ...]
    proxy_jump: str | None = None
    proxy_command: str | None = None

    @property
    def label(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


def _ssh_config(path: str) -> paramiko.SSHConfig:
    p = Path(path).expanduser()
    return paramiko.SSHConfig.from_path(str(p)) if p.is_file() else paramiko.SSHConfig()


def resolve_hop(alias: str, cfg: paramiko.SSHConfig, *, user: str | None = None,
                port: int | None = None, known_hosts: str = "~/.ssh/known_hosts",
                identity: str | None = None) -> Hop:
    """``alias`` as ssh would resolve it with ``cfg`` (explicit values win)."""
    entry: Any = cfg.lookup(alias)
    files = [identity] if identity else []
    files += list(entry.get("identityfile", []))
    if not files:
        files = [f"~/.ssh/{k}" for k in DEFAULT_KEYS]
    known = [known_hosts]
    known += str(entry.get("userknownhostsfile", "")).split()
    try:
        cfg_port = int(entry.get("port", 22))
    except ValueError:
        raise RemoteError(f"ssh config: Port {entry.get('port')!r} of host {alias!r} is "
                          "not a number") from None
    jump = entry.get("proxyjump")
    return Hop(alias=alias, hostname=str(entry.get("hostname", alias)),
               port=port or cfg_port,
               user=user or str(entry.get("user") or getpass.getuser()),
               identity_files=tuple(dict.fromkeys(str(Path(f).expanduser()) for f in files)),
               known_hosts=tuple(dict.fromkeys(str(Path(k).expanduser()) for k in known)),
               proxy_jump=None if jump in (None, "none") else str(jump),
               proxy_command=entry.get("proxycommand"))


def hops_for(target: RemoteTarget) -> list[Hop]:
    """The chain of hops to ``target``: jump hosts first (ProxyJump, comma-separated, each
    itself resolved through the ssh config), the login node last."""
    cfg = _ssh_config(target.ssh_config)
    last = resolve_hop(target.host, cfg, user=target.user, port=target.port,
                       known_hosts=target.known_hosts, identity=target.identity_file)
    chain: list[Hop] = [last]
    seen = {last.alias}
    while chain[0].proxy_jump:
        jumps = [j.strip() for j in chain[0].proxy_jump.split(",") if j.strip()]
        resolved = []
        for spec in jumps:
            user, host, port = parse_destination(spec)
            if host in seen:
                raise RemoteError(f"ssh config: ProxyJump loops through {host!r}")
            seen.add(host)
            resolved.append(resolve_hop(host, cfg, user=user, port=port,
                                        known_hosts=target.known_hosts))
        chain = resolved + chain
    return chain


class _Prompter:
    """Answers keyboard-interactive and password prompts from the terminal (asked once
    per hop: the answers are kept for the call)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.answers: dict[str, str] = {}

    def __call__(self, title: str, instructions: str,
                 prompts: Sequence[tuple[str, bool]]) -> list[str]:
        if not sys.stdin.isatty():
            raise RemoteError(f"{self.label} asks for keyboard-interactive input and this "
                              "is not a terminal; use a key or the agent")
        if instructions.strip():
            print(instructions.strip(), file=sys.stderr)
        out = []
        for text, echo in prompts:
            if text not in self.answers:
                self.answers[text] = (input(text) if echo else
                                      getpass.getpass(f"({self.label}) {text}"))
            out.append(self.answers[text])
        return out


@dataclass
class Connection:
    """The open chain: ``transport`` reaches the login node; the others are the hops."""

    transport: paramiko.Transport
    hops: list[paramiko.Transport] = field(default_factory=list)
    label: str = ""

    def close(self) -> None:
        for t in [self.transport, *reversed(self.hops)]:
            t.close()


def _known_entries(hop: Hop) -> tuple[list[str], list[Any]]:
    """The names ``hop`` goes by in known_hosts and the entries found for them."""
    known = paramiko.HostKeys()
    for path in hop.known_hosts:
        if Path(path).is_file():
            try:
                known.load(path)
            except (OSError, paramiko.SSHException) as exc:
                raise RemoteError(f"known_hosts {path} could not be read: {exc}") from None
    names = [hop.hostname] if hop.port == 22 else [f"[{hop.hostname}]:{hop.port}"]
    if hop.alias != hop.hostname:
        names.append(hop.alias if hop.port == 22 else f"[{hop.alias}]:{hop.port}")
    return names, [e for e in (known.lookup(n) for n in names) if e is not None]


def _prefer_known_key_types(t: paramiko.Transport, found: list[Any]) -> None:
    """Ask for the host key types known_hosts holds (as ssh does), so a server with
    several host keys offers one we can check."""
    known_types = {kind for e in found for kind in e.keys()}
    if "ssh-rsa" in known_types:  # an RSA key signs with SHA-2 too
        known_types |= {"rsa-sha2-512", "rsa-sha2-256"}
    opts = t.get_security_options()
    preferred = [k for k in opts.key_types if k in known_types]
    if preferred:
        opts.key_types = preferred


def _check_host_key(t: paramiko.Transport, hop: Hop, names: list[str],
                    found: list[Any]) -> None:
    key = t.get_remote_server_key()
    if not found:
        raise RemoteError(
            f"host key of {names[0]} is not in known_hosts ({', '.join(hop.known_hosts)}); "
            f"connect once with `ssh -p {hop.port} {hop.user}@{hop.hostname}` and check "
            f"the fingerprint ({key.get_name()} {key.fingerprint})")
    for e in found:
        if key.get_name() in e and e[key.get_name()] == key:
            return
    raise RemoteError(
        f"host key of {names[0]} does not match known_hosts: the server offered "
        f"{key.get_name()} {key.fingerprint}; refusing to connect (a changed key may mean "
        "someone is intercepting the connection; if the key really changed, update "
        "known_hosts)")


def _keys(hop: Hop) -> list[tuple[str, paramiko.PKey]]:
    keys: list[tuple[str, paramiko.PKey]] = []
    for path in hop.identity_files:
        if not Path(path).is_file():
            continue
        try:
            keys.append((path, paramiko.PKey.from_path(path)))
        except paramiko.PasswordRequiredException:
            phrase = getpass.getpass(f"passphrase for {path}: ") if sys.stdin.isatty() else None
            if phrase is not None:
                keys.append((path, paramiko.PKey.from_path(path, phrase)))
        except (OSError, paramiko.SSHException, ValueError) as exc:
            raise RemoteError(f"identity file {path} could not be read: {exc}") from None
    return keys


def _authenticate(t: paramiko.Transport, hop: Hop) -> None:
    tried: list[str] = []
    try:
        agent_keys = paramiko.Agent().get_keys()
    except paramiko.SSHException:
        agent_keys = ()
    candidates = [("agent", k) for k in agent_keys] + _keys(hop)
    for name, key in candidates:
        tried.append(name if name == "agent" else Path(name).name)
        try:
            t.auth_publickey(hop.user, key)
        except paramiko.AuthenticationException:
            continue
        except paramiko.SSHException as exc:
            raise RemoteError(f"{hop.label}: authentication failed ({exc})") from None
        if t.is_authenticated():
            return
    allowed: list[str] = []
    try:
        t.auth_none(hop.user)
    except paramiko.BadAuthenticationType as exc:
        allowed = list(exc.allowed_types)
    except paramiko.SSHException:
        pass
    if t.is_authenticated():
        return
    if "keyboard-interactive" in allowed and sys.stdin.isatty():
        tried.append("keyboard-interactive")
        try:
            t.auth_interactive(hop.user, _Prompter(hop.label))
        except paramiko.AuthenticationException:
            pass
        if t.is_authenticated():
            return
    elif "password" in allowed and sys.stdin.isatty():
        tried.append("password")
        try:
            t.auth_password(hop.user, getpass.getpass(f"{hop.label} password: "))
        except paramiko.AuthenticationException:
            pass
        if t.is_authenticated():
            return
    raise RemoteError(f"{hop.label} refused authentication (tried: "
                      f"{', '.join(tried) or 'no key found'}; the server allows: "
                      f"{', '.join(allowed) or 'unknown'})")


def _open_socket(hop: Hop, via: paramiko.Transport | None) -> Any:
    if via is not None:
        try:
            return via.open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                    timeout=TIMEOUT_S)
        except (paramiko.SSHException, OSError) as exc:
            raise RemoteError(f"the jump host could not reach {hop.hostname}:{hop.port} "
                              f"({exc})") from None
    if hop.proxy_command:
        return paramiko.ProxyCommand(hop.proxy_command)
    try:
        return socket.create_connection((hop.hostname, hop.port), timeout=TIMEOUT_S)
    except OSError as exc:
        raise RemoteError(f"cannot reach {hop.hostname}:{hop.port} ({exc.strerror or exc})"
                          ) from None


def connect(target: RemoteTarget) -> Connection:
    """Open the chain to ``target``, every host key checked, every hop authenticated."""
    chain = hops_for(target)
    opened: list[paramiko.Transport] = []
    try:
        for hop in chain:
            sock = _open_socket(hop, opened[-1] if opened else None)
            t = paramiko.Transport(sock)
            opened.append(t)
            names, found = _known_entries(hop)
            _prefer_known_key_types(t, found)
            try:
                t.start_client(timeout=TIMEOUT_S)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise RemoteError(f"SSH handshake with {hop.label} failed ({exc})") from None
            _check_host_key(t, hop, names, found)
            _authenticate(t, hop)
    except BaseException:
        for t in reversed(opened):
            t.close()
        raise
    return Connection(opened[-1], opened[:-1], chain[-1].label)
