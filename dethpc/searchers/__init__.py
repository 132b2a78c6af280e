"""Hyperparameter searchers: pure state machines, events in, actions out.

Owns: the ``Searcher`` protocol (``base``), the built-in searchers (``single``,
``random_search``, ``grid``, ``asha`` and the trial ``pool`` they share), sampling
(``sampling``), snapshots and replay (``replay``), ``det preview-search``
(``preview``) and ``make_searcher`` (``factory``). Each searcher declares its
``SPEC`` with ``dethpc.config.searcher_registry``.
Must not: do I/O, read the store or know Slurm.
"""
