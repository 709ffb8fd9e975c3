"""Residual-stream activations at identity tokens: spans, capture during suite runs, the activation store. The
store's `ActivationStore` and `load` are imported on first use, so the layer grammar (activations.layer_spec), which
checks a run's settings, is read without torch."""

from behavioral.core.exports import lazy_exports

__all__ = ["ActivationStore", "load"]
__getattr__ = lazy_exports(__name__, {"activations.store": ("ActivationStore", "load")})
