"""empathy-gap: intergroup empathy gaps in language models, measured and explained."""
