"""What a suite is: the protocol every suite implements, the registry that finds one by name, its work units and its
card (the README's table of what it measures)."""
