#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs lint and the whole suite (browser tests, the docs'
# strict build and every code block of the docs included).
# Usage: scripts/test.sh [extra pytest args], e.g. scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh test,docs  # test: every extra (capeval[all]) and the test tools
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# The CLIP authors' tokenizer and model code (a test-only reference). --no-deps: its requirements pull
# torchvision, which has no build for the CPU torch used here.
"${PIP[@]}" --no-deps -c constraints.txt "openai-clip==1.0.1"
# open_clip's own tokenizer (tokenizer.py and its BPE file, loaded by path) for the OpenCLIP-file tests; --no-deps
# for the same reason (torchvision, timm).
"${PIP[@]}" --no-deps -c constraints.txt "open_clip_torch==3.3.0"
# embedding-reader (what autofaiss and clip-retrieval read embeddings with) reads the clip-retrieval layout back in
# its test; --no-deps: it caps pandas<3, which would downgrade pandas 3 (its reader works with pandas 3, tested).
"${PIP[@]}" --no-deps -c constraints.txt "embedding-reader==1.8.1"

# img2dataset, in a virtualenv of its own (it pins pandas<3, webdataset<0.3, albumentations<2): the tests run its
# command line to write real WebDataset and Parquet shards (tests/img2dataset_runs.py).
PYTHON=${PYTHON:-python3}
[ -x .venv-img2dataset/bin/python ] || "$PYTHON" -m venv .venv-img2dataset
.venv-img2dataset/bin/python -m pip install -q --disable-pip-version-check \
    -c constraints-img2dataset.txt "img2dataset==1.47.0"

# Debian's Chromium and ChromeDriver for the browser tests of the Spaces, and a Java runtime for the
# pycocoevalcap baselines (PTB tokenizer, METEOR) of the benchmark tests.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
