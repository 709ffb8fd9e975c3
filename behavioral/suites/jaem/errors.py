"""The one error of the jaem suite's inputs (templates, dimensions, lexicons, classifiers)."""


class JaemInputError(ValueError):
    """A jaem input that cannot be used; the message names the file, line, field or value and what was expected."""
