"""What people touch: the ``dethpc`` command and everything behind its verbs.

Owns: the typer CLI (``cli``) and its console script (``entry``), remote use over SSH
(``remote``), the read-only dashboard (``dashboard``), plots (``plots``), tasks
(shells, notebooks, TensorBoard, commands: ``tasks``), existing sbatch scripts
(``sbatchwrap``), admin checks (``admin``), and the read-only views and text layout
they share (``views``, ``layout``).
Must not: be imported by any layer below it. This package's ``__init__`` imports
nothing: ``python -m dethpc.surfaces.tasks.nbserve`` runs inside a job.
"""
