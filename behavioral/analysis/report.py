"""The report of any suite's analysis, written once as a sequence of blocks (title and source, the runs with their
provenance, method notes, the suite's sections with their tables and figures, every file written) and rendered from
them as report.md here and as report.html by behavioral.analysis.html, so both say the same in the same order."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from behavioral.report.formats import code_span, literal, readable
from behavioral.analysis.runs import Run
from behavioral.report.blocks import Analysis, Figure, Table
from behavioral.core.options import FLAG

REPORT = "report.md"
REPORT_HTML = "report.html"
# The run settings every run line states, in this order (manifest config keys).
RUN_SETTINGS = ("mode", "dtype", "prompt_format", "chat_format", "temperature", "top_p", "samples", "max_new_tokens",
                "seed")
# What an option's help says a value left unset means: "...; none: the first span kind" or "(default: the run's)".
_UNSET = re.compile(r"(?:\bnone: (.+)|\(default:? (.+)\))$")


def run_line(run: Run) -> str:
    """One bullet naming a run: directory, model and its hash, the settings that decide rows, code and date."""
    config, prov = run.config, run.manifest.provenance
    model = code_span(config.get("model"))
    if config.get("model_hash"):
        model += f" (sha256 {code_span(str(config['model_hash'])[:12])}…)"
    if config.get("revision"):
        model += f" revision {code_span(config['revision'])}"
    settings = ", ".join(f"{k} {literal(config[k])}" for k in RUN_SETTINGS if config.get(k) is not None)
    data = "".join(f"; {literal(k)} {code_span(v)}" for k, v in config.items()
                   if k.endswith(("_hash", "_sha256")) and k != "model_hash" and v)
    dirty = " with uncommitted changes" if prov.get("git_dirty") else ""
    created = f", created {literal(prov['created'])}" if prov.get("created") else ""
    return (f"- **{literal(run.name)}**: {code_span(run.run_dir)}; model {model}; {settings}{data}; "
            f"device {literal(readable(prov.get('device')))}; git {code_span(prov.get('git_commit'))}{dirty}"
            f"{created}; {literal(run.completeness.describe())}")


def unset_meanings(options: object) -> dict[str, str]:
    """What each field of an options dataclass (None: no options) means left unset, where its flag's help says it."""
    fields = dataclasses.fields(options) if options is not None else ()
    found = {f.name: _UNSET.search(f.metadata[FLAG].help) for f in fields if FLAG in f.metadata}
    return {name: match[1] or match[2] for name, match in found.items() if match}


def options_text(options: Mapping[str, object], unset: Mapping[str, str]) -> str:
    """The report's options line: each option's name in words and its value as a reader reads it (a list's items
    each `literal`), a value left unset with what that means where `unset` says it."""
    def one(name: str, value: object) -> str:
        items = value if isinstance(value, (list, tuple)) else [value]
        text = ", ".join(literal(readable(v)) for v in items)
        meaning = f" ({unset[name]})" if value is None and name in unset else ""
        return f"{name.replace('_', ' ')}: {text}{meaning}"
    return "Analysis options: " + "; ".join(one(k, v) for k, v in options.items()) + "."


@dataclass(frozen=True)
class Heading:
    """A heading of the report (`level` 1: the title); its text is Markdown."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    """Markdown text: paragraphs and `- ` bullet lists with bold, italic, code and links (what the reports write);
    a value from a file or a flag goes in through formats.literal, so no viewer makes markup of it."""

    markdown: str


Block = Heading | Text | Table | Figure


def blocks(analysis: Analysis, runs: Sequence[Run], options: dict) -> Iterator[Block]:
    """The report's content in order; a table is printed and a figure shown where it stands."""
    yield from (Heading(analysis.title, 1), Text(analysis.source))
    if runs:  # a page over analyses (a sweep's) names its runs in its own tables
        yield from (Heading("Runs"), Text("\n".join(map(run_line, runs))))
    if options:
        yield Text(options_text(options, analysis.unset))
    if analysis.notes:
        yield from (Heading("Method"), Text("\n".join(f"- {note}" for note in analysis.notes)))
    for section in analysis.sections:
        yield Heading(section.title)
        if section.text:
            yield Text(section.text)
        yield from section.tables
        yield from section.figures
    yield from how_to_read([t for section in analysis.sections for t in section.tables])
    files = [f"- [{t.name}.csv]({t.name}.csv), [{t.name}.md]({t.name}.md): {t.title}" for t in analysis.tables()]
    files += [f"- [{f.name}.png]({f.name}.png), [{f.name}.pdf]({f.name}.pdf): {f.title}" for f in analysis.figures()]
    files += [f"- [{name}]({name})" for name in analysis.json]
    files += [f"- [{REPORT_HTML}]({REPORT_HTML}): this report as one page, its figures embedded and its tables "
              "sortable by a click on a column's header",
              "- [manifest.json](manifest.json): the runs, their provenance and the analysis options"]
    yield from (Heading("Files"), Text("\n".join(files)))


def how_to_read(tables: Sequence[Table]) -> Iterator[Block]:
    """The "How to read" section: per printed table with definitions, what each of its columns holds."""
    defined = [t for t in tables if t.definitions]
    if defined:
        yield Heading("How to read the tables")
    for table in defined:
        yield Text(f"**{table.title}** ({table.name}.csv holds every column):\n\n{definitions(table)}")


def definitions(table: Table) -> str:
    """What each defined column of `table` holds, as a Markdown list."""
    return "\n".join(f"- {code_span(header)}: {text}" for header, text in table.definitions.items())


def caption(table: Table) -> str:
    """A printed table's title (bold) and note, as Markdown."""
    return f"**{table.title}**" + (f" {table.note}" if table.note else "")


def _markdown(block: Block) -> str:
    """One block as Markdown, ending in a newline (blocks are set apart by an empty line)."""
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}\n"
    if isinstance(block, Text):
        return f"{block.markdown}\n"
    if isinstance(block, Table):
        return f"{caption(block)}\n\n{block.markdown()}"
    return f"![{block.title}]({block.name}.png)\n"


def render(analysis: Analysis, runs: Sequence[Run], options: dict) -> str:
    """The report's Markdown text."""
    return "\n".join(map(_markdown, blocks(analysis, runs, options)))
