"""`empathy-gap import giebench`: the authors' result files (their prompt files with each reply in `answer`) as a
run directory that `analyze` reads beside the project's own runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from behavioral.inference.engine import Generation
from behavioral.rundir.provenance import files_sha256, provenance
from behavioral.runner.run import prepare_out_dir, result_row
from behavioral.rundir.manifest import SCHEMA_VERSION, Manifest, Plan, RunDirError, new_run_id, write_manifest
from behavioral.rundir.parts import RESULTS, result_schema, write_part
from behavioral.suites.giebench.items import GieRunItem, ItemsError, read_prompt_file, release_items
from behavioral.suites.giebench.options import FIELDS
from behavioral.suites.giebench.prompts import PROMPT_TYPES

FILE_TYPES = {"cot": "COT", "id": "ID", "raw": "Raw"}  # file name part of each prompt type


def result_files(directory: Path, name: str) -> dict[str, Path]:
    """The three result files of `name` in `directory`: `{name}-COT-Prompt.json` etc., or the only `*-COT-Prompt.json`
    there is."""
    if not directory.is_dir():
        raise ItemsError(f"--results {directory}: no such directory")
    files = {}
    for t, part in FILE_TYPES.items():
        named = directory / f"{name}-{part}-Prompt.json"
        found = sorted(directory.glob(f"*-{part}-Prompt.json"))
        if named.is_file():
            files[t] = named
        elif len(found) == 1:
            files[t] = found[0]
        else:
            raise ItemsError(f"--results {directory}: {'no' if not found else 'several'} *-{part}-Prompt.json files "
                             f"and no {named.name}; expected one result file per prompt type")
    return files


def import_results(results: str | Path, name: str, out: str | Path) -> Path:
    """Check the authors' result files of `name` and write them to the new run directory `out` (generate mode)."""
    files = result_files(Path(results), name)
    records = {t: read_prompt_file(path, extra=("answer",)) for t, path in files.items()}
    items = release_items(files, records)
    out = Path(out)
    if prepare_out_dir(out):
        raise RunDirError(f"--out {out}: already holds a run; expected a new run directory")
    # the authors' files do not say whether a reply hit their token limit: `truncated` stays unknown (None)
    rows = [result_row(f"{t}|0", GieRunItem(item, t), 0, Generation(records[t][item.item_id]["answer"], None), None)
            for t in PROMPT_TYPES for item in items]
    config = {"suite": "giebench", "schema": SCHEMA_VERSION, "model": name, "mode": "generate",
              "imported_from": str(Path(results).resolve()), "items_sha256": files_sha256(files.values()),
              "n_items": len(items), "swaps": [], "unit_size": len(items), "samples": 1}
    made = [d for d in (out, out / RESULTS) if not d.exists()]
    try:
        run_id = new_run_id()
        write_part(out, "r000-0", rows, result_schema(FIELDS, run_id))
        plan = Plan(len(PROMPT_TYPES), len(rows), tuple((t, len(items)) for t in PROMPT_TYPES))
        write_manifest(out, Manifest(config, {"name": name}, provenance(), plan, run_id))
    except BaseException:  # nothing half-written: remove the outermost folder this import made
        if made:
            shutil.rmtree(made[0], ignore_errors=True)
        raise
    return out
