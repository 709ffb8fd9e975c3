"""A run: its configuration, the loop that streams a suite's work units through a backend into a run directory, its
estimate before loading, its progress, and the run read back."""
