"""Mechanistic analyses of the empathy gap built on captured activations."""
