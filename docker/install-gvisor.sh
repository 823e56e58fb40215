#!/usr/bin/env bash
# Builds gVisor's runsc and its containerd shim (containerd-shim-runsc-v1)
# from gVisor's Go module at the version pinned below, installs them in
# /usr/local/bin, and registers runsc with the local Docker Engine as the
# runtime "runsc", with the engine's seccomp profile applied inside gVisor
# (--oci-seccomp), so that docker mode can run with
# CODE_EXEC_DOCKER_RUNTIME=runsc.
#
#   docker/install-gvisor.sh               build (or reuse the build), install, register
#   docker/install-gvisor.sh --build-only  build (or reuse the build) and print its folder,
#                                          which holds runsc and containerd-shim-runsc-v1, on
#                                          stdout; installs and registers nothing and needs
#                                          no Docker Engine (.ci/ensure-kubernetes.sh takes
#                                          the test cluster's gVisor from there)
#
# Idempotent and non-interactive; needs root, python3, Go 1.26.3 or newer and,
# to build, patch (installed with apt-get when missing). Downloads nothing
# but gVisor's module and its dependencies, through the Go module proxy. The
# build is kept in $RUNSC_CACHE_DIR under the hash of its inputs (the pinned
# version, the patches, the build flags, the Go version and architecture), so
# a second run builds nothing. Debian's runsc package, if installed, is left
# alone and no longer used. The engine is not restarted: the runtime is
# written to /etc/docker/daemon.json (other settings are kept) and dockerd is
# sent SIGHUP, which reloads its runtimes without touching running containers.
#
# Environment:
#   RUNSC_PLATFORM      gVisor platform (default systrap, gVisor's default: works
#                       in VMs and containers without /dev/kvm; see docs/modes.md)
#   RUNSC_EXTRA_ARGS    more runsc flags, space separated (default none)
#   RUNSC_CACHE_DIR     where builds are kept (default /var/cache/codeexec/gvisor)
#   DOCKER_DAEMON_JSON  the engine's configuration file (default /etc/docker/daemon.json)
#   CODE_EXEC_DOCKER_IMAGE  the image of the check run at the end (default
#                       codeexec-sandbox:latest; the check is skipped without it)
set -euo pipefail

# gVisor's `go` branch, as the Go module proxy serves it (the module has no
# tagged versions). To move on: `go list -m gvisor.dev/gvisor@latest` gives the
# newest pseudo-version; check the patch still applies, and whether it is
# still needed.
gvisor_version=v0.0.0-20260905035102-160fafc42237

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# runsc's OCI seccomp converter ignores errnoRet (google/gvisor#14688), which
# breaks every thread under Docker's profile; the shim gives up where root
# cannot lower its OOM score (no CAP_SYS_RESOURCE). See each file's header.
patch_files=("$here/gvisor-oci-seccomp-errnoret.patch" "$here/gvisor-shim-oom-score.patch")
platform="${RUNSC_PLATFORM:-systrap}"
conf="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
cache="${RUNSC_CACHE_DIR:-/var/cache/codeexec/gvisor}"
image="${CODE_EXEC_DOCKER_IMAGE:-codeexec-sandbox:latest}"
bindir=/usr/local/bin
runsc_path="$bindir/runsc"

say() { printf 'install-gvisor: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

build_only=0
case "${1:-}" in
"") ;;
--build-only) build_only=1 ;;
*) die "unknown argument '$1': the only one is --build-only" ;;
esac
# Only the build's folder goes to stdout (with --build-only); everything
# else, go's and patch's output included, goes to stderr.
exec 3>&1 1>&2

[[ "$(id -u)" == 0 ]] || die "needs root (installs into $bindir and edits $conf, or builds into $cache)"
if ((!build_only)); then
    command -v docker >/dev/null 2>&1 || die "the docker CLI is missing (run .ci/ensure-docker.sh)"
    docker info >/dev/null 2>&1 || die "no Docker Engine answers (run .ci/ensure-docker.sh)"
fi
command -v python3 >/dev/null 2>&1 || die "python3 is needed to read go's output and edit $conf"
for p in "${patch_files[@]}"; do
    [[ -f "$p" ]] || die "$p is missing"
done
if ! command -v go >/dev/null 2>&1; then
    [[ -x /usr/local/go/bin/go ]] || die "Go is needed to build runsc (1.26.3 or newer; put it on PATH)"
    PATH="/usr/local/go/bin:$PATH"
fi

# The build: static binaries (no cgo), the version runsc reports set to the
# pinned one, marked as patched. The environment's GOFLAGS, GOOS and the like
# do not reach it.
ldflags="-X gvisor.dev/gvisor/runsc/version.version=$gvisor_version+oci-seccomp-errnoret"
build() { env GOFLAGS= GOWORK=off GOOS= GOARCH= CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" "$@"; }
key="$(
    {
        echo "$gvisor_version"
        declare -f build
        echo "$ldflags"
        cat "${patch_files[@]}" | sha256sum
        go env GOVERSION GOHOSTARCH
    } | sha256sum | cut -c1-16
)"
out="$cache/$key"

if [[ -x "$out/runsc" && -x "$out/containerd-shim-runsc-v1" ]]; then
    say "gVisor $gvisor_version: using the build in $out"
else
    say "building gVisor $gvisor_version (runsc and containerd-shim-runsc-v1) into $out"
    if ! command -v patch >/dev/null 2>&1; then
        command -v apt-get >/dev/null 2>&1 || die "patch is needed to build runsc, and apt-get is not available: install it by hand"
        say "installing patch with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends patch </dev/null >/dev/null 2>&1 ||
            { apt-get update -q </dev/null >/dev/null && apt-get install -y -q --no-install-recommends patch </dev/null; } ||
            die "apt-get install patch failed"
    fi
    start=$SECONDS
    mkdir -p "$cache"
    work="$(mktemp -d "$cache/.build-XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    src="$(cd "$work" && env GOFLAGS= GOWORK=off go mod download -json "gvisor.dev/gvisor@$gvisor_version" |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))')" ||
        die "could not download gvisor.dev/gvisor@$gvisor_version through the Go module proxy ($(go env GOPROXY))"
    cp -r "$src" "$work/src"
    chmod -R u+w "$work/src"
    for p in "${patch_files[@]}"; do
        patch -d "$work/src" -p1 --forward --batch --quiet <"$p" ||
            die "$(basename "$p") does not apply to gVisor $gvisor_version: has the fix landed upstream? (see the patch's header)"
    done
    mkdir "$work/bin"
    (cd "$work/src" && build -o "$work/bin/runsc" ./runsc && build -o "$work/bin/containerd-shim-runsc-v1" ./shim) ||
        die "building runsc failed (see above)"
    rm -rf "$out"
    mv "$work/bin" "$out"
    say "built in $((SECONDS - start)) s"
fi
if ((build_only)); then
    printf '%s\n' "$out" >&3
    exit 0
fi

# Install the binaries, replacing them (by rename: running sandboxes keep
# their binary) only when they differ.
for b in runsc containerd-shim-runsc-v1; do
    if ! cmp -s "$out/$b" "$bindir/$b"; then
        install -m 0755 "$out/$b" "$bindir/.$b.codeexec-tmp"
        mv -f "$bindir/.$b.codeexec-tmp" "$bindir/$b"
    fi
done
say "$("$runsc_path" --version | head -n1) at $runsc_path"

# --oci-seccomp: the engine's seccomp profile (Docker's default) filters the
# program's system calls inside gVisor, as runc applies it on the host: no user
# namespace, keyrings, bpf, mounts and the rest it refuses.
# --network=none: codeexec's containers have no network anyway (network mode
# none), and runsc then has no network stack at all.
# --host-uds=open: a program may connect to a host unix socket in a folder
# mounted into its container, as under runc: CODE_EXEC_NETWORK=allowlist
# reaches codeexec's egress proxy that way, packages on demand too (the only
# host folders codeexec mounts are the run's socket folder, the packages cache
# (read-only but for an install's own folder) and CODE_EXEC_WORKSPACE when set).
args=("--platform=$platform" "--network=none" "--oci-seccomp" "--host-uds=open")
if [[ -n "${RUNSC_EXTRA_ARGS:-}" ]]; then
    read -r -a extra <<<"$RUNSC_EXTRA_ARGS"
    args+=("${extra[@]}")
fi
want="$(python3 -c 'import json, sys; print(json.dumps({"path": sys.argv[1], "runtimeArgs": sys.argv[2:]}, sort_keys=True))' "$runsc_path" "${args[@]}")"

mkdir -p "$(dirname "$conf")"
changed=$(python3 - "$conf" "$want" <<'EOF'
import json, os, sys
conf, want = sys.argv[1], json.loads(sys.argv[2])
cur = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        cur = json.load(f)
if cur.get("runtimes", {}).get("runsc") == want:
    print("no")
    sys.exit(0)
cur.setdefault("runtimes", {})["runsc"] = want
tmp = conf + ".codeexec-tmp"
with open(tmp, "w") as f:
    json.dump(cur, f, indent=2)
    f.write("\n")
os.replace(tmp, conf)
print("yes")
EOF
) || die "could not update $conf"

# registered: the engine runs runsc as written in $conf.
registered() {
    docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null |
        python3 -c 'import json, sys; sys.exit(json.dumps(json.load(sys.stdin), sort_keys=True) != sys.argv[1])' "$want" 2>/dev/null
}

if [[ "$changed" == yes ]] || ! registered; then
    pid="$(pgrep -xo dockerd || true)"
    [[ -n "$pid" ]] || die "dockerd is not running here; restart the engine by hand to load $conf"
    say "registered runsc (${args[*]}) in $conf; reloading dockerd (SIGHUP to pid $pid)"
    kill -HUP "$pid"
    for _ in $(seq 1 20); do
        registered && break
        sleep 0.5
    done
    registered || die "dockerd did not load the runtime runsc as written in $conf (see its log; is $conf valid, or does a command-line flag conflict with it?)"
fi

# Which gVisor the engine now runs, and that a program can start a thread
# under the engine's profile (it cannot without the patch).
if docker image inspect "$image" >/dev/null 2>&1; then
    check='cat /proc/version && { ! command -v python3 >/dev/null || python3 -c "import threading; t = threading.Thread(target=int); t.start(); t.join()"; }'
    got="$(docker run --rm --runtime runsc --network none "$image" /bin/sh -c "$check" 2>&1)" ||
        die "a container of $image under runsc failed: $got"
    say "a container under runsc says: $got"
else
    say "$image is not there: no check run (build it with docker/build-sandbox-image.sh)"
fi
say "ready: the engine runs $runsc_path as the runtime runsc; run docker mode with CODE_EXEC_DOCKER_RUNTIME=runsc"
