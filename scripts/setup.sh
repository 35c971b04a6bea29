#!/usr/bin/env bash
# Creates .venv and installs capeval (editable) with the given extras, torch pinned by constraints.txt, then
# places the six evaluate modules in evaluate's module cache so evaluate.load("clipscore") works by bare name.
# Usage: scripts/setup.sh [extras], e.g. scripts/setup.sh text,video (none: the core, the CLIP metrics)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
spec="."
[ -n "${1:-}" ] && spec=".[$1]"
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e "$spec"
.venv/bin/capeval install-modules
echo "capeval is installed in .venv: \`source .venv/bin/activate\` puts the capeval command on PATH" >&2
