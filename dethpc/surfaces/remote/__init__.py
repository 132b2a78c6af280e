"""Remote use of dethpc from a workstation: the CLI runs ``dethpc`` on the login node
over one SSH connection per call (see docs/remote.md).

Owns: ``location`` (where the user-level ``remote.yaml`` is), ``target`` (where to
connect: ``--remote`` and the user-level ``remote.yaml``, pure), ``versions`` (the
version check, pure), ``ssh`` (the paramiko connection seam: ssh_config, ProxyJump,
agent and key auth, known_hosts), ``upload`` (the context's content-addressed upload
over SFTP, its plan pure), ``forward`` (running a command on the far side and streaming
its output), ``cli`` (the glue the ``dethpc`` command calls).
Must not: import the CLI (its app is handed in), or open the store on the workstation.
"""
