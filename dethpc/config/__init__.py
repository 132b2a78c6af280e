"""Experiment and cluster configuration: parsing, validation, overrides.

Public API: ``load_experiment_config(path, overrides)``, ``parse_experiment_config(raw)``,
``load_cluster_config()``; the typed values live in ``dethpc.config.model``.
"""
