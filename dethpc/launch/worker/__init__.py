"""The worker pool (issue 16 items 1 and 2, first cut): long-lived workers that run
trials from work items in an experiment's run directory.

Owns: the pool directory's files and their atomic lease protocol (``queue``), the
preloaded fork server that starts each trial as its own process (``forkserver``) and
the worker loop (``main``, ``python -m dethpc.launch.worker``).
Must not: talk to the store or to Slurm; decide which trial runs next (the searcher
and the daemon do, by writing work items). See docs/searchers.md "Worker pool".
"""
