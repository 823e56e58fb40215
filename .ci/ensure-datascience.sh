#!/usr/bin/env bash
# Makes sure this host's Debian python3 can import numpy, pandas, matplotlib
# and scipy, so that the process-mode tests of files in and charts out can
# run (CI sets CODE_EXEC_REQUIRE_DATASCIENCE=1 afterwards: they then fail
# instead of skipping).
#
# Installs Debian's packages with apt-get (no registry besides Debian's
# mirror), for the python3 that process mode runs: /usr/bin/python3, found on
# its minimal PATH (/usr/local/bin:/usr/bin:/bin).
# Idempotent and non-interactive. Needs root (or sudo without a password)
# when something is missing.
set -euo pipefail

python="${CODE_EXEC_TEST_PYTHON:-/usr/bin/python3}"
packages=(python3-numpy python3-pandas python3-matplotlib python3-scipy)
export DEBIAN_FRONTEND=noninteractive

say() { printf 'ensure-datascience: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

check() { "$python" -I -c 'import numpy, pandas, matplotlib, scipy' >/dev/null 2>&1; }

if check; then
    say "$python imports numpy, pandas, matplotlib and scipy"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "$python cannot import numpy, pandas, matplotlib and scipy, and apt-get is not available: install them by hand"
sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || die "need root (or passwordless sudo) to install ${packages[*]}"
    sudo_cmd=(sudo -n)
fi
say "installing ${packages[*]} with apt-get"
"${sudo_cmd[@]}" apt-get update -q </dev/null || die "apt-get update failed"
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${packages[@]}" </dev/null \
    || die "apt-get install ${packages[*]} failed"
check || die "$python still cannot import numpy, pandas, matplotlib and scipy after the install (is it Debian's python3?)"
say "ready: $python imports numpy, pandas, matplotlib and scipy"
