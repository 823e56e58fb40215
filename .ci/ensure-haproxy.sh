#!/usr/bin/env bash
# Makes sure Debian's HAProxy is installed for the replicas test, which puts
# it before several servers (run with CODE_EXEC_REQUIRE_HAPROXY=1 in CI, so a
# missing load balancer fails the build instead of skipping). Idempotent and
# non-interactive.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
say() { printf 'ensure-haproxy: %s\n' "$*" >&2; }
PATH="$PATH:/usr/sbin"
if command -v haproxy >/dev/null 2>&1; then
    say "$(haproxy -v 2>/dev/null | head -n 1) present"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || { say "error: haproxy is missing and apt-get is not available"; exit 1; }
sudo_cmd=()
[[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo -n)
say "installing haproxy with apt-get"
"${sudo_cmd[@]}" apt-get update -q </dev/null
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends haproxy </dev/null
say "$(haproxy -v | head -n 1) installed"
