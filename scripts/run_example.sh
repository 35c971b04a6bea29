#!/usr/bin/env bash
# The main job: installs capeval into .venv and scores the example captions with CLIPScore and RefCLIPScore.
# Extra arguments go to `capeval score`, e.g. --model src/capeval/shapes/assets/shapes-clip (offline).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/capeval score examples/shapes/candidates.json examples/shapes/images \
    --references-json examples/shapes/references.json \
    --save-per-instance examples/shapes/scores.json "$@"
