"""dethpc: Determined-style deep-learning experiments on Slurm clusters.

The package root owns only the version string; everything else lives in the
sub-packages described in docs/architecture.md.
"""

__version__ = "0.1.0"
