"""Backends: where job scripts run (Slurm, or local processes with Slurm semantics).

Owns: the ``Backend`` protocol and the values it speaks (``base``), the Slurm backend
(``slurm``: the protocol over the CLI, delegating to ``slurm_site`` for site facts
read once, ``slurm_submit`` for sbatch, ``slurm_poll`` for the batched poll and
``slurm_actions`` for scancel/scontrol; ``slurm_parse`` for its output,
``slurm_limits`` for sacctmgr, ``pyslurm_query`` where pyslurm matches), the local
backend (``local``, its spool and per-task supervisor), per-user job limits
(``limits``) and the factory that picks one from the cluster config (``factory``).
Must not: open the store, render scripts or decide what to submit (the control plane
does); import the job side. A login node without Slurm still imports this package.
"""
