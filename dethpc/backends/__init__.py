"""Backends: where job scripts run (Slurm, or local processes with Slurm semantics)."""
