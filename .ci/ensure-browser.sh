#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed for the approvals-console browser
# test (run with CODE_EXEC_REQUIRE_BROWSER=1 in CI, so a missing browser fails
# the build instead of skipping). Idempotent and non-interactive.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
say() { printf 'ensure-browser: %s\n' "$*" >&2; }
if command -v chromium >/dev/null 2>&1; then
    say "$(chromium --version 2>/dev/null || echo chromium) present"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || { say "error: chromium is missing and apt-get is not available"; exit 1; }
sudo_cmd=()
[[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo -n)
say "installing chromium with apt-get"
"${sudo_cmd[@]}" apt-get update -q </dev/null
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends chromium </dev/null
say "$(chromium --version) installed"
