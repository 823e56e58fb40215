#!/usr/bin/env bash
# Installs gVisor's runsc from Debian's packages and registers it with the
# local Docker Engine as the runtime "runsc", so that docker mode can run with
# CODE_EXEC_DOCKER_RUNTIME=runsc.
#
# Idempotent and non-interactive; needs root. Downloads nothing but Debian's
# package (apt-get install runsc). The engine is not restarted: the runtime is
# added to /etc/docker/daemon.json (other settings are kept) and dockerd is
# sent SIGHUP, which reloads its runtimes without touching running containers.
#
# Environment:
#   RUNSC_PLATFORM      gVisor platform (default ptrace: works in VMs and
#                       containers without /dev/kvm; see README)
#   RUNSC_EXTRA_ARGS    more runsc flags, space separated (default none)
#   DOCKER_DAEMON_JSON  the engine's configuration file (default /etc/docker/daemon.json)
set -euo pipefail

platform="${RUNSC_PLATFORM:-ptrace}"
conf="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
export DEBIAN_FRONTEND=noninteractive

say() { printf 'install-gvisor: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[[ "$(id -u)" == 0 ]] || die "needs root (installs a package and edits $conf)"
command -v docker >/dev/null 2>&1 || die "the docker CLI is missing (run .ci/ensure-docker.sh)"
docker info >/dev/null 2>&1 || die "no Docker Engine answers (run .ci/ensure-docker.sh)"

if ! command -v runsc >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "runsc is missing and apt-get is not available: install gVisor by hand"
    say "installing runsc with apt-get"
    apt-get install -y -q --no-install-recommends runsc </dev/null >/dev/null 2>&1 ||
        { apt-get update -q </dev/null >/dev/null && apt-get install -y -q --no-install-recommends runsc </dev/null; } ||
        die "apt-get install runsc failed"
fi
runsc_path="$(command -v runsc)"
say "$("$runsc_path" --version | head -n1) at $runsc_path"

# --network=none: codeexec's containers have no network anyway (network mode
# none), and runsc then has no network stack at all.
# Not --oci-seccomp: with it, Debian's runsc applies the engine's profile in a
# way that makes Node abort at start (node_platform.cc), so the system calls
# Docker's profile refuses are served by gVisor's own kernel instead.
args=("--platform=$platform" "--network=none")
if [[ -n "${RUNSC_EXTRA_ARGS:-}" ]]; then
    read -r -a extra <<<"$RUNSC_EXTRA_ARGS"
    args+=("${extra[@]}")
fi

command -v python3 >/dev/null 2>&1 || die "python3 is needed to edit $conf"
mkdir -p "$(dirname "$conf")"
changed=$(python3 - "$conf" "$runsc_path" "${args[@]}" <<'EOF'
import json, os, sys
conf, path, args = sys.argv[1], sys.argv[2], sys.argv[3:]
cur = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        cur = json.load(f)
want = {"path": path, "runtimeArgs": args}
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

registered() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

if [[ "$changed" == yes ]] || ! registered; then
    pid="$(pgrep -xo dockerd || true)"
    [[ -n "$pid" ]] || die "dockerd is not running here; restart the engine by hand to load $conf"
    say "registered runsc (${args[*]}) in $conf; reloading dockerd (SIGHUP to pid $pid)"
    kill -HUP "$pid"
    for _ in $(seq 1 20); do
        registered && break
        sleep 0.5
    done
    registered || die "dockerd did not load the runtime runsc (see its log; is $conf valid, or does a command-line flag conflict with it?)"
fi
say "ready: the engine knows the runtime runsc; run docker mode with CODE_EXEC_DOCKER_RUNTIME=runsc"
