"""The vocabulary both sides of the job boundary share: the bottom layer.

Owns: the one error family (``errors``), the exit codes agreed between training code,
job wrapper and backends (``exitcodes``), the run-directory layout (``paths``), the
JSON-lines files jobs write and the daemon reads (``jsonlines``), Slurm's hostlist and
sbatch option syntax (``hostlist``, ``sbatch_options``), what a backend can do
(``traits``), an experiment's kind (``kinds``), the job side of self-registration
(``detached``: the spool entry a job dethpc did not submit writes, and the daemon
adopts), the one table of environment variables, ``DETHPC_*`` and ``DET_*``
(``jobenv``), what Slurm's environment says about a trial's slots in Determined's terms
(``slots``), the helpers of Determined's
``det.util``/``determined.common.util`` its examples use (``util``), the subprocess seam
(``runner``), the version string (``version``) and a process that must not outlive
its parent (``parent_death``: the pool worker and its forked trials).
Must not: import any other part of dethpc, or anything a compute node lacks (no
database, no CLI libraries): the job side imports these modules on every rank.
"""
