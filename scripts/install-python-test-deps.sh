#!/usr/bin/env bash
# Installs the Python packages the server tests use (tests/server/*.py): the official openai client,
# pytest, and websockets (the DevTools client that drives headless Chromium). Quiet and idempotent.
set -euo pipefail
python3 -m pip install --quiet --disable-pip-version-check openai pytest websockets
