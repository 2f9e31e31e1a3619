#!/usr/bin/env bash
# Installs the Python packages the server tests use (tests/server/*.py): the official openai client,
# pytest, websockets (the DevTools client that drives headless Chromium), and jinja2 (the chat
# templates rendered by Jinja itself, against megaqwen's, tests/chat). Quiet and idempotent.
# Works with a pyenv/venv Python and with Debian's system Python (which needs python3-pip and, being
# "externally managed" under PEP 668, --break-system-packages for user-level test tools).
set -euo pipefail
packages=(openai pytest websockets jinja2)
if python3 -c "import openai, pytest, websockets, jinja2" 2>/dev/null; then
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
fi
pip=(python3 -m pip install --quiet --disable-pip-version-check)
if ! "${pip[@]}" "${packages[@]}" 2>/tmp/megaqwen-pip.log; then
  if grep -q "externally-managed-environment" /tmp/megaqwen-pip.log; then
    "${pip[@]}" --break-system-packages "${packages[@]}"
  else
    cat /tmp/megaqwen-pip.log >&2
    exit 1
  fi
fi
