"""Residual-stream activations at identity tokens: spans, capture during suite runs, the activation store."""

from activations.store import ActivationStore, load

__all__ = ["ActivationStore", "load"]
