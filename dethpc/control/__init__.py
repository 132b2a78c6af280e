"""The control plane: the daemon's loop and everything it decides and enacts.

Owns: the daemon and its phases (``daemon``), its reconcile of an experiment (``reconcile``), why a
job ended (``job_end``), the lease that keeps one daemon per user (``lease``), adoption
of self-registered jobs (``adoption``), checkpoint garbage collection
(``checkpoint_gc``), the worker pool's daemon half (``worker_pool_tend``, ``worker_pool_view``), the
requests users make of it (``experiments``), running it as a service (``service``) and
the model-directory snapshot taken at submit (``snapshot``).
Must not: print, parse command lines or import the surfaces (CLI, dashboard, remote);
a compute node never imports it.
"""
