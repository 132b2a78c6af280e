"""dethpc's version string, the one every job script and remote check compares.

Owns: ``__version__`` (``dethpc.__version__`` re-exports it).
Must not: import anything.
"""

__version__ = "0.1.0"
