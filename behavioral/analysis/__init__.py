"""One analysis for every suite: a suite declares its view of stored rows, its metrics and its tables and figures
(spec); this package reads the runs, names them, formats every number one way, and writes the files, the report and
the manifest (write.analyze)."""

from behavioral.report.formats import cell, markdown
from behavioral.analysis.runs import Run, model_name, read_runs
from behavioral.report.blocks import Analysis, Figure, Section, Table, sized_figure
from behavioral.analysis.write import ANALYSIS_DIR, analyze

__all__ = ["ANALYSIS_DIR", "Analysis", "Figure", "Run", "Section", "Table", "analyze", "cell", "markdown",
           "model_name", "sized_figure", "read_runs"]
