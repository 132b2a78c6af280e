"""Tasks: the non-trial processes and jobs a user starts, lists and stops.

Owns: one model (``dethpc.store.models.Task``) and its shared operations
(``registry``), the job builder of shells, notebooks and commands (``interactive``),
each kind (``tensorboard`` with ``derive``/``tbserve``, ``notebook`` with ``nbserve``,
``shell``, ``command``) and where a task's log is (``logs``).
Must not: import its modules here: ``nbserve`` and ``tbserve`` run as processes of
their own (``python -m dethpc.surfaces.tasks.nbserve``), inside jobs too.
"""
