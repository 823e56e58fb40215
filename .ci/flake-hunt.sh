#!/usr/bin/env bash
# The flake hunt: the README's test command (go run ./cmd/codeexec-test, which
# runs go test -race -count=1 ./... and says what it skipped),
# with CI's requirements, run again and again on a machine whose cores are
# all busy: stress-ng with four CPU workers per core and IO workers, started
# here and stopped at the end, whatever happened. It stops at the first
# failing run and says how many runs passed in a row.
#
#   bash .ci/flake-hunt.sh [RUNS]      (default 5; needs what .ci/run sets up)
#
# Each run's output is kept in $FLAKE_DIR (default /tmp/codeexec-flake-hunt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-timeout=60m"
runs=${1:-5}
dir=${FLAKE_DIR:-/tmp/codeexec-flake-hunt}
mkdir -p "$dir"
command -v stress-ng >/dev/null || { echo "flake-hunt: stress-ng is missing: apt-get install -y stress-ng" >&2; exit 2; }
export CODE_EXEC_REQUIRE_DOCKER=1 CODE_EXEC_REQUIRE_DATASCIENCE=1 CODE_EXEC_REQUIRE_INSTALLERS=1 \
    CODE_EXEC_REQUIRE_BROWSER=1 CODE_EXEC_REQUIRE_HAPROXY=1 CODE_EXEC_REQUIRE_ISOLATION=1

cores=$(nproc)
# Bounded: stress-ng ends by itself after 12 hours at the latest.
stress-ng --cpu $((4 * cores)) --io "$cores" --hdd 1 --hdd-bytes 256M --temp-path "$dir" \
    --timeout 12h --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null; wait "$stress" 2>/dev/null || true' EXIT

passed=0
for i in $(seq 1 "$runs"); do
    start=$SECONDS
    if go run ./cmd/codeexec-test >"$dir/run-$i.log" 2>&1; then
        passed=$((passed + 1))
        echo "flake-hunt: run $i passed in $((SECONDS - start)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
    else
        echo "flake-hunt: run $i FAILED after $((SECONDS - start)) s; $passed passed in a row before it; see $dir/run-$i.log:"
        grep -E '^(--- FAIL|FAIL|panic:)' "$dir/run-$i.log" | head -20
        exit 1
    fi
done
echo "flake-hunt: $passed of $runs runs passed in a row under load"
