#!/usr/bin/env bash
# Makes sure this host has the package installers that process mode's
# install phase runs (CODE_EXEC_PACKAGES=true): pip for /usr/bin/python3 and
# npm on process mode's minimal PATH (/usr/local/bin:/usr/bin:/bin), so that
# the packages tests can run (CI sets CODE_EXEC_REQUIRE_INSTALLERS=1
# afterwards: they then fail instead of skipping).
#
# Installs Debian's python3-pip, and Debian's npm only when no npm is there
# (a nodejs that bundles its own npm is left alone), with apt-get.
# Idempotent and non-interactive. Needs root (or sudo without a password)
# when something is missing.
set -euo pipefail

python="${CODE_EXEC_TEST_PYTHON:-/usr/bin/python3}"
export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/local/bin:/usr/bin:/bin:$PATH"

say() { printf 'ensure-installers: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

missing=()
"$python" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
PATH=/usr/local/bin:/usr/bin:/bin command -v npm >/dev/null 2>&1 || missing+=(npm)
if [[ ${#missing[@]} -eq 0 ]]; then
    say "$("$python" -m pip --version | cut -d' ' -f1-2) for $python, npm $(PATH=/usr/local/bin:/usr/bin:/bin npm --version)"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "${missing[*]} missing and apt-get is not available: install them by hand"
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || die "need root (or passwordless sudo) to install ${missing[*]}"
    sudo_cmd=(sudo -n)
fi
say "installing ${missing[*]} with apt-get"
"${sudo_cmd[@]}" apt-get update -q </dev/null || die "apt-get update failed"
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null \
    || die "apt-get install ${missing[*]} failed"
"$python" -m pip --version >/dev/null 2>&1 || die "$python still has no pip after the install (is it Debian's python3?)"
PATH=/usr/local/bin:/usr/bin:/bin command -v npm >/dev/null 2>&1 || die "still no npm on /usr/local/bin:/usr/bin:/bin"
say "ready"
