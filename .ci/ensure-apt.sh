#!/usr/bin/env bash
# ensure-apt.sh COMMAND PACKAGE: makes sure COMMAND is installed, with
# Debian's PACKAGE when it is not (apt-get, as root or through sudo -n).
# Idempotent and non-interactive; says the version with COMMAND's first
# line of "COMMAND --version" (or -v, which haproxy takes).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
cmd=$1 pkg=$2
PATH="$PATH:/usr/sbin"
say() { printf 'ensure-%s: %s\n' "$cmd" "$*" >&2; }
version() { { "$cmd" --version 2>/dev/null || "$cmd" -v 2>/dev/null || echo "$cmd"; } | head -n 1; }
if command -v "$cmd" >/dev/null 2>&1; then
    say "$(version) present"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || { say "error: $cmd is missing and apt-get is not available"; exit 1; }
sudo_cmd=()
[[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo -n)
say "installing $pkg with apt-get"
"${sudo_cmd[@]}" apt-get update -q </dev/null
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "$pkg" </dev/null
say "$(version) installed"
