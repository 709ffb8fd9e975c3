#!/usr/bin/env bash
# Builds .venv-genderbench (git-ignored) at the repository root: GenderBench 0.5.0 without its ~130 exact pins, plus
# what its ISEAR probe imports, with the nltk it pins. tests/test_isear_crosscheck.py runs when
# EMPATHY_GAP_GENDERBENCH_PYTHON names the python this prints.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-$root/.venv-genderbench}"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-deps genderbench==0.5.0
"$venv/bin/pip" install --quiet --no-warn-conflicts nltk==3.8.1 numpy scipy pandas tqdm anthropic openai nest_asyncio
echo "export EMPATHY_GAP_GENDERBENCH_PYTHON=$venv/bin/python"
