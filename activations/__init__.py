"""Residual-stream activations at identity tokens (see issue: capture during suite runs)."""
