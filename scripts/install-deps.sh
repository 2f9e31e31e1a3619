#!/usr/bin/env bash
# Installs what megaqwen needs to build and test on Debian 12 (bookworm). Idempotent:
# packages already present are skipped, so a warm machine pays nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  clang libclang-rt-14-dev          # libFuzzer targets
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libpcre2-dev libutf8proc-dev      # tokenizer: regex with Unicode properties, NFC
  libedit-dev                       # chat line editing (BSD licensed)
  libcpp-httplib-dev                # server
  chromium                          # server tests: the chat page in a headless browser
  python3
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
