"""The run directory on disk: its manifest and the rules a rerun is held to, the sealed result parts, the lock, and
where an output came from (provenance)."""
