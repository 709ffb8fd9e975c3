"""One analysis for every suite: a suite declares its view of stored rows, its metrics and its tables and figures
(behavioral.report), this package reads the runs, names them, formats every number one way, and writes the files,
the report and the manifest (write.analyze). Its names are imported on first use, so a light module of it (the
studies' table) imports nothing heavy."""

from behavioral.core.exports import lazy_exports

__all__ = ["ANALYSIS_DIR", "Analysis", "Figure", "Run", "Section", "Table", "analyze", "cell", "markdown",
           "model_name", "sized_figure", "read_runs"]
__getattr__ = lazy_exports(__name__, {
    "behavioral.report.formats": ("cell", "markdown"),
    "behavioral.analysis.runs": ("Run", "model_name", "read_runs"),
    "behavioral.report.blocks": ("Analysis", "Figure", "Section", "Table", "sized_figure"),
    "behavioral.analysis.write": ("ANALYSIS_DIR", "analyze"),
})
