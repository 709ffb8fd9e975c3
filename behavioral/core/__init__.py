"""The ground every layer stands on: declared options, files written whole, optional packages, lazy exports, row
selection and the launcher's ranks; it imports nothing of the project."""
