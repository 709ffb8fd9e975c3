"""The suites: each a folder here with a Suite object and a README card, known by name through behavioral.suite.registry."""
