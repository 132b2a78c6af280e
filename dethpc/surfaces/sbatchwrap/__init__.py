"""``dethpc sbatch``: existing sbatch scripts under dethpc (docs/existing-scripts.md).

Owns nothing itself; its modules: the sbatch options and ``#SBATCH`` lines of a
submission, the wrapper a script runs in, the plain submission, and ``search`` (a
searcher over an unchanged script) with ``submitenv`` (the trials' environment).
Must not: import its modules here (``submitenv`` runs alone under ``python -I -S``).
"""
