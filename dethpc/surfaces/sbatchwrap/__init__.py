"""``dethpc sbatch``: existing sbatch scripts under dethpc (docs/existing-scripts.md).

Owns nothing itself; its modules: the command line of a submission (``search_cli``),
an array's task ids (``arrays``), the plain drop-in (``plain``), what it needs of the
cluster config (``site``), the run directory's ``dethpc`` shim (``shim``) and ``search`` (a
searcher over an unchanged script; its jobs are ``dethpc.jobs.script_jobs``, its
trials' environment ``dethpc.launch.submitenv``).
Must not: import its modules here.
"""
