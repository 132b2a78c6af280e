"""Issue 18 item 1: remote submit over SSH, against a real ``sshd`` (Debian's
openssh-server on 127.0.0.1, key auth, the dev cluster's non-root test user) driving
the dev cluster. The "workstation" is a root process here with its own empty
``DETHPC_HOME`` (never created: the store is opened only on the login node).

- submit, logs --follow (Ctrl-C ends the far command), kill and describe through
  ``--remote``; the daemon runs on the login node as the user;
- an upload cut mid-file resumes: the files already sent are not sent again, the cut
  one continues from its size;
- a jump host (a second sshd as ProxyJump in the ssh config);
- an unknown or changed host key, a key the server does not know and another version
  on the far side are refused with one line, no traceback;
- an ssh-agent's key; the host key type known_hosts holds asked for.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dethpc.control.snapshot import list_context
from dethpc.devcluster.users import ClusterUser, user_dir
from dethpc.surfaces.remote import ssh, upload
from dethpc.surfaces.remote.target import RemoteTarget, load_file
from tests.local.conftest import TOY, write_config
from tests.slurm.conftest import SlurmCluster
from tests.slurm.fixtures.sshd import SSHD, Sshd, ssh_keygen


@dataclass
class Remote:
    root: Path          # the workstation's side (root-owned): keys, ssh config, remote.yaml
    work: Path          # the login node's side: owned by the test user
    login: Sshd
    jump: Sshd
    user: ClusterUser

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env.update({"HOME": str(self.root / "home"),
                    "DETHPC_HOME": str(self.root / "local-home"),
                    "DETHPC_REMOTE_CONFIG": str(self.root / "remote.yaml"), "COLUMNS": "1000",
                    **extra})
        env.pop("DETHPC_CLUSTER_CONFIG", None)
        return env

    def cli(self, *args: str, timeout: float = 120, **extra: str
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dethpc.surfaces.cli.main", *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=self.env(**extra), cwd=self.root)

    def target(self) -> RemoteTarget:
        found = load_file(self.root / "remote.yaml")
        assert found is not None
        return found


@pytest.fixture(scope="module")
def remote(slurm_cluster: SlurmCluster, cluster_user: ClusterUser,
           user_python: list[str]) -> Iterator[Remote]:
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is missing (scripts/setup.sh --tests installs openssh-server)")
    root = Path(user_dir(cluster_user).with_name(f"dethpc-sshd-{os.getpid()}"))
    root.mkdir(mode=0o755)
    (root / "home").mkdir()
    work = user_dir(cluster_user)
    pub = ssh_keygen(root / "client_key")
    (root / "authorized_keys").write_text(pub + "\n")
    (root / "authorized_keys").chmod(0o644)
    login, jump = Sshd(root, cluster_user.name).start(), Sshd(root, cluster_user.name).start()
    (root / "known_hosts").write_text(login.known_hosts_line() + "\n"
                                      + jump.known_hosts_line() + "\n")
    (root / "ssh_config").write_text(
        f"Host login\n  HostName 127.0.0.1\n  Port {login.port}\n  User {cluster_user.name}\n"
        f"  ProxyJump {cluster_user.name}@127.0.0.1:{jump.port}\n"
        f"Host *\n  IdentityFile {root}/client_key\n")
    cluster = work / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "backend": "slurm", "runs_root": str(work / "runs"), "tick_min_s": 0.2,
        "tick_max_s": 1.0, "pools": {"default": {"partition": "debug"}}}))
    shutil.chown(cluster, cluster_user.uid, cluster_user.gid)
    far = [user_python[0], f"HOME={work}", f"DETHPC_HOME={work}/home",
           f"DETHPC_CLUSTER_CONFIG={cluster}", "PATH=/usr/local/bin:/usr/bin:/bin",
           # the login shell sshd starts has none of ours: name this lane's cluster
           f"SLURM_CONF={slurm_cluster.layout.slurm_conf}",
           *user_python[1:], "-m", "dethpc.surfaces.cli.main"]
    (root / "remote.yaml").write_text(yaml.safe_dump({"remote": {
        "host": f"{cluster_user.name}@127.0.0.1", "port": login.port,
        "command": shlex.join(far), "area": f"{work}/area",
        "ssh_config": str(root / "ssh_config"), "known_hosts": str(root / "known_hosts")}}))
    r = Remote(root, work, login, jump, cluster_user)
    try:
        yield r
    finally:
        r.cli("daemon", "stop", timeout=60)
        subprocess.run(["scancel", "-u", cluster_user.name], capture_output=True, timeout=30)
        login.stop()
        jump.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def far_processes(user: ClusterUser, words: str) -> list[str]:
    res = subprocess.run(["pgrep", "-a", "-u", user.name, "-f", words],
                         capture_output=True, text=True, timeout=30)
    return [line for line in res.stdout.splitlines() if "pgrep" not in line]


def test_submit_follow_kill_describe_over_ssh(remote: Remote, slurm_cluster: SlurmCluster
                                               ) -> None:
    ctx = remote.root / "toy"
    shutil.copytree(TOY, ctx)
    (ctx / "data.bin").write_bytes(os.urandom(4096))
    (ctx / ".detignore").write_text("data.bin\n")
    exp = write_config(remote.root / "exp.yaml", hyperparameters={
        "x": {"type": "double", "minval": 0, "maxval": 6}, "step_time": 0.2},
        searcher={"name": "random", "metric": "validation_loss", "max_trials": 1,
                  "max_length": {"batches": 5000}})
    sub = remote.cli("submit", str(exp), str(ctx), "--json")
    assert sub.returncode == 0, sub.stderr
    exp_id = json.loads(sub.stdout)["id"]
    sent = len(list_context(ctx)) + 1  # what .detignore keeps, and the config
    assert sent == 3
    assert f"uploaded {sent} files" in sub.stderr, sub.stderr
    assert not (remote.root / "local-home").exists(), "the workstation opened a store"
    # the far side snapshotted the uploaded tree (data.bin left out by .detignore)
    run_dir = Path(json.loads(remote.cli("experiment", "describe", str(exp_id), "--json")
                              .stdout)["run_dir"])
    assert (run_dir / "model" / "train.py").exists() or any(run_dir.rglob("train.py"))
    assert not any(run_dir.rglob("data.bin"))

    follow = subprocess.Popen([sys.executable, "-m", "dethpc.surfaces.cli.main", "experiment",
                               "logs", str(exp_id), "--follow"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=remote.env(), cwd=remote.root)
    try:
        assert follow.stdout is not None
        lines: list[bytes] = []
        deadline = time.monotonic() + 180
        while not lines and time.monotonic() < deadline:
            line = follow.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert lines and b"trial 1" in lines[0], lines
        assert far_processes(remote.user, "experiment logs"), "no far logs command"
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) == 130
    finally:
        follow.kill()
    SlurmCluster.wait_for("the far `logs --follow` to end",
                          lambda: not far_processes(remote.user, "experiment logs"), 30)

    kill = remote.cli("experiment", "kill", str(exp_id))
    assert kill.returncode == 0, kill.stderr
    waited = remote.cli("experiment", "wait", str(exp_id), "--timeout", "120", timeout=180)
    assert "CANCELED" in waited.stdout or "KILLED" in waited.stdout, waited
    SlurmCluster.wait_for("squeue to forget the user's jobs", lambda: not slurm_cluster.run(
        ["squeue", "-h", "-u", remote.user.name]).strip(), 60)


def test_an_upload_cut_mid_file_resumes(remote: Remote) -> None:
    ctx = remote.root / "big"
    ctx.mkdir()
    for i in range(6):
        (ctx / f"part{i}.bin").write_bytes(os.urandom(3 * upload.CHUNK + 100))
    cfg = write_config(remote.root / "big.yaml")
    target = remote.target()
    cut_at = 3  # files complete before the cut; the 4th is cut after one chunk

    class Cut(Exception):
        pass

    conn = ssh.connect(target)
    done: list[str] = []

    def drop(item: upload.Send, so_far: int) -> None:
        if so_far == item.size:
            done.append(item.sha)
        elif len(done) == cut_at and so_far >= upload.CHUNK:
            # writes are pipelined: let the first chunk land, then drop the connection
            part = remote.work / "area" / "objects" / f"{item.sha}.part"
            SlurmCluster.wait_for("a chunk on the login node", lambda: part.exists() and
                                  part.stat().st_size >= upload.CHUNK, 30, 0.05)
            conn.transport.close()
            raise Cut

    sftp = conn.transport.open_sftp_client()
    assert sftp is not None
    with pytest.raises((Cut, OSError, EOFError)):
        upload.upload_tree(sftp, f"{remote.work}/area", ctx, cfg, drop)
    conn.close()
    parts = [p for p in (remote.work / "area" / "objects").iterdir() if p.name.endswith(".part")]
    size = 3 * upload.CHUNK + 100
    cut = parts[0].stat().st_size if len(parts) == 1 else -1
    assert 0 < cut < size, parts

    conn = ssh.connect(target)
    try:
        sftp = conn.transport.open_sftp_client()
        assert sftp is not None
        _, report = upload.upload_tree(sftp, f"{remote.work}/area", ctx, cfg)
    finally:
        conn.close()
    assert report.present == cut_at
    assert len(report.resumed) == 1 and report.resumed[0] == parts[0].name[:-len(".part")]
    assert len(report.sent) == 6 + 1 - cut_at - 1  # the rest and the config
    assert report.bytes_sent == (size - cut) + 2 * size + cfg.stat().st_size
    # the same context again: nothing is sent
    conn = ssh.connect(target)
    try:
        sftp = conn.transport.open_sftp_client()
        assert sftp is not None
        _, report = upload.upload_tree(sftp, f"{remote.work}/area", ctx, cfg)
    finally:
        conn.close()
    assert (report.sent, report.resumed, report.present, report.bytes_sent) == ([], [], 7, 0)


def test_a_jump_host(remote: Remote) -> None:
    before = remote.jump.accepted()
    res = remote.cli("--remote", "login", "experiment", "list", "--json")
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads(res.stdout), list)
    assert remote.jump.accepted() == before + 1, "the call did not pass the jump host"


@pytest.mark.parametrize("case", ["changed host key", "unknown host", "wrong key",
                                  "other version"])
def test_refusals_are_one_clear_line(remote: Remote, case: str) -> None:
    root = remote.root / case.replace(" ", "-")
    root.mkdir()
    cfg = yaml.safe_load((remote.root / "remote.yaml").read_text())
    block = cfg["remote"]
    expected = {"changed host key": "does not match known_hosts",
                "unknown host": "is not in known_hosts",
                "wrong key": "refused authentication",
                "other version": "dethpc versions differ: 0.1.0 here, 9.9.9 on"}[case]
    if case == "changed host key":
        ssh_keygen(root / "other_host")
        key = (root / "other_host.pub").read_text().split()
        (root / "known_hosts").write_text(f"[127.0.0.1]:{remote.login.port} {key[0]} {key[1]}\n")
        block["known_hosts"] = str(root / "known_hosts")
    elif case == "unknown host":
        (root / "known_hosts").write_text("")
        block["known_hosts"] = str(root / "known_hosts")
    elif case == "wrong key":
        ssh_keygen(root / "stranger")
        block["identity_file"] = str(root / "stranger")
        (root / "ssh_config").write_text("")
        block["ssh_config"] = str(root / "ssh_config")
    else:
        block["command"] = "sh -c 'echo 9.9.9' sh"
    (root / "remote.yaml").write_text(yaml.safe_dump(cfg))
    res = remote.cli("experiment", "list", DETHPC_REMOTE_CONFIG=str(root / "remote.yaml"))
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines


def test_agent_auth(remote: Remote) -> None:
    """No key file anywhere: the agent's key (``SSH_AUTH_SOCK``) logs in."""
    root = remote.root / "agent"
    root.mkdir()
    sock = root / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        SlurmCluster.wait_for("ssh-agent's socket", sock.exists, 30, 0.05)
        subprocess.run(["ssh-add", "-q", str(remote.root / "client_key")], check=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, timeout=30,
                       capture_output=True)
        cfg = yaml.safe_load((remote.root / "remote.yaml").read_text())
        (root / "ssh_config").write_text("")
        cfg["remote"]["ssh_config"] = str(root / "ssh_config")
        (root / "remote.yaml").write_text(yaml.safe_dump(cfg))
        res = remote.cli("experiment", "list", "--json",
                         DETHPC_REMOTE_CONFIG=str(root / "remote.yaml"),
                         SSH_AUTH_SOCK=str(sock))
        assert res.returncode == 0, res.stderr
        assert isinstance(json.loads(res.stdout), list)
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_the_host_key_type_known_hosts_holds_is_asked_for(remote: Remote) -> None:
    """A server with ed25519 and RSA host keys, known_hosts holding only the RSA one: the
    RSA key is asked for and checked (as ssh does), not refused as a changed key."""
    root = remote.root / "rsa"
    root.mkdir()
    both = Sshd(remote.root, remote.user.name, rsa_host_key=True).start()
    try:
        (root / "known_hosts").write_text(both.known_hosts_line(rsa=True) + "\n")
        cfg = yaml.safe_load((remote.root / "remote.yaml").read_text())
        cfg["remote"].update(port=both.port, known_hosts=str(root / "known_hosts"))
        target = load_file_from(cfg, root)
        conn = ssh.connect(target)
        try:
            assert conn.transport.get_remote_server_key().get_name() == "ssh-rsa"
        finally:
            conn.close()
    finally:
        both.stop()


def load_file_from(cfg: dict[str, object], root: Path) -> RemoteTarget:
    (root / "remote.yaml").write_text(yaml.safe_dump(cfg))
    found = load_file(root / "remote.yaml")
    assert found is not None
    return found
