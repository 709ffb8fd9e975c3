"""report.md of any suite's analysis: title and source, the runs with their provenance, method notes, the suite's
sections (tables printed, figures shown) and every file written."""

from __future__ import annotations

from collections.abc import Sequence

from behavioral.analysis.runs import Run
from behavioral.analysis.spec import Analysis

REPORT = "report.md"
# The run settings every run line states, in this order (manifest config keys).
RUN_SETTINGS = ("mode", "dtype", "prompt_format", "chat_format", "temperature", "top_p", "samples", "max_new_tokens",
                "seed")


def run_line(run: Run) -> str:
    """One bullet naming a run: directory, model and its hash, the settings that decide rows, code and date."""
    config, prov = run.config, run.manifest.provenance
    model = f"`{config.get('model')}`"
    if config.get("model_hash"):
        model += f" (sha256 `{str(config['model_hash'])[:12]}…`)"
    if config.get("revision"):
        model += f" revision `{config['revision']}`"
    settings = ", ".join(f"{k} {config[k]}" for k in RUN_SETTINGS if config.get(k) is not None)
    data = "".join(f"; {k} `{v}`" for k, v in config.items()
                   if k.endswith(("_hash", "_sha256")) and k != "model_hash" and v)
    return (f"- **{run.name}**: `{run.run_dir}`; model {model}; {settings}{data}; device {prov.get('device')}; "
            f"git `{prov.get('git_commit')}`{' with uncommitted changes' if prov.get('git_dirty') else ''}, "
            f"created {prov.get('created')}; {run.completeness.describe()}")


def render(analysis: Analysis, runs: Sequence[Run], options: dict) -> str:
    """The report's Markdown text."""
    lines = [f"# {analysis.title}", "", analysis.source, "", "## Runs", "", *map(run_line, runs), ""]
    if options:
        lines += ["Analysis options: " + ", ".join(f"{k} {v}" for k, v in options.items()) + ".", ""]
    if analysis.notes:
        lines += ["## Method", "", *(f"- {note}" for note in analysis.notes), ""]
    for section in analysis.sections:
        lines += [f"## {section.title}", ""]
        if section.text:
            lines += [section.text, ""]
        for table in section.tables:
            lines += [f"**{table.title}**" + (f" {table.note}" if table.note else ""), "", table.markdown()]
        lines += [f"![{fig.title}]({fig.name}.png)\n" for fig in section.figures]
    lines += ["## Files", ""]
    lines += [f"- [{t.name}.csv]({t.name}.csv), [{t.name}.md]({t.name}.md): {t.title}" for t in analysis.tables()]
    lines += [f"- [{f.name}.png]({f.name}.png), [{f.name}.pdf]({f.name}.pdf): {f.title}"
              for f in analysis.figures()]
    lines += [f"- [{name}]({name})" for name in analysis.json]
    lines += ["- [manifest.json](manifest.json): the runs, their provenance and the analysis options", ""]
    return "\n".join(lines)
