"""Hyperparameter searchers: pure state machines, events in, actions out."""
