"""Job building: from configs to the exact scripts and argv that Slurm (or the local
backend) runs.

Owns: a trial's allocation shape (``allocation``), every ``#SBATCH`` line
(``directives``), container runtimes and image pulls (``containers``, ``imagepull``),
rendering of ``sbatch_templates/`` (``render``, ``jobscript``; the Jinja2 environment,
``templates``), what each experiment
kind submits (``kinds``), the worker pool's array script and work items
(``worker_pool_script``, ``worker_pool_items``) and Slurm's verdict at submit (``verdict``).
Must not: open the store, submit, cancel or poll (the control plane does), or import
the control plane or the surfaces. Functions here are pure or only render text.
"""
