#!/usr/bin/env bash
# Makes sure a Docker Engine answers and that codeexec's sandbox images exist
# (the default one and the data-science one), so that the docker-mode tests can run (they run with CODE_EXEC_REQUIRE_DOCKER=1
# in CI, so a missing engine fails the build instead of skipping).
#
# Idempotent and non-interactive (works with CI=true and no stdin):
#   1. if `docker info` fails: install docker.io with apt-get when dockerd is
#      missing, start dockerd in the background (log: $DOCKERD_LOG), and wait up
#      to $DOCKER_WAIT_SECONDS for the engine to answer;
#   2. if a sandbox image is missing, build it with docker/build-sandbox-image.sh
#      (codeexec-sandbox:latest, then codeexec-sandbox:datascience, which
#      starts from the first one's layers);
#   3. install docker-registry (Debian's package of the distribution project's
#      registry) when missing: the docker-mode tests of pulling a missing image
#      serve a registry of their own on loopback with it. Its packaged service
#      (on :5000) is not left running.
#
# Needs root (or sudo without a password) to install or start the engine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${CODE_EXEC_DOCKER_IMAGE:-codeexec-sandbox:latest}"
datascience_image="${CODE_EXEC_DATASCIENCE_IMAGE:-codeexec-sandbox:datascience}"
log_file="${DOCKERD_LOG:-/var/log/dockerd.log}"
wait_seconds="${DOCKER_WAIT_SECONDS:-60}"
export DEBIAN_FRONTEND=noninteractive

say() { printf 'ensure-docker: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo_cmd=(sudo -n)
    fi
fi
as_root() {
    if [[ "$(id -u)" == 0 || ${#sudo_cmd[@]} -gt 0 ]]; then
        "${sudo_cmd[@]}" "$@"
    else
        die "need root (or passwordless sudo) to run: $*"
    fi
}

engine_up() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_up; then
    say "Docker Engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo unknown version))"
else
    if [[ -n "${DOCKER_HOST:-}" ]]; then
        die "DOCKER_HOST=$DOCKER_HOST is set but no engine answers there; fix DOCKER_HOST or unset it to use a local engine"
    fi
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
        say "installing docker.io with apt-get"
        command -v apt-get >/dev/null 2>&1 || die "dockerd is missing and apt-get is not available: install a Docker Engine by hand"
        as_root apt-get update -q </dev/null || die "apt-get update failed"
        as_root apt-get install -y -q --no-install-recommends docker.io </dev/null || die "apt-get install docker.io failed"
    fi
    start_dockerd() {
        say "starting dockerd in the background (log: $log_file)"
        as_root mkdir -p "$(dirname "$log_file")"
        # nohup + setsid: the engine must outlive this script and the CI step's shell.
        as_root sh -c "nohup setsid dockerd >>'$log_file' 2>&1 </dev/null &"
    }
    started=0
    if pgrep -x dockerd >/dev/null 2>&1; then
        say "dockerd is already running; waiting for it to answer"
    else
        start_dockerd
        started=1
    fi
    for ((i = 0; i < wait_seconds; i++)); do
        engine_up && break
        # A dockerd that was shutting down when we looked has exited since.
        if [[ $started == 0 ]] && ! pgrep -x dockerd >/dev/null 2>&1; then
            start_dockerd
            started=1
        fi
        sleep 1
    done
    if ! engine_up; then
        say "last lines of $log_file:"
        as_root tail -n 20 "$log_file" >&2 || true
        die "the Docker Engine did not answer within ${wait_seconds}s"
    fi
    if [[ "$(id -u)" != 0 ]] && ! docker info >/dev/null 2>&1; then
        die "the engine runs but this user cannot reach /var/run/docker.sock (add it to the docker group)"
    fi
    say "Docker Engine $(docker version --format '{{.Server.Version}}') answers"
fi

# An image built by an earlier version of sandbox/docker/image/Dockerfile lacks
# what its labels say the current one has: pip and npm
# (io.codeexec.sandbox.installers, for CODE_EXEC_PACKAGES) and localhost
# without /etc/hosts (io.codeexec.sandbox.localhost, for the runtime's own
# network namespace). Such an image is rebuilt once; the data-science image
# starts from the default one and carries its labels.
label() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
stale() {
    [[ "$(label "$1" io.codeexec.sandbox.installers)" != "pip npm" ]] && { echo "no package installers (pip, npm)"; return 0; }
    [[ "$(label "$1" io.codeexec.sandbox.localhost)" != "nss-myhostname" ]] && { echo "no nss-myhostname (localhost without /etc/hosts)"; return 0; }
    return 1
}
ensure_image() { # image profile what
    local why
    if ! docker image inspect "$1" >/dev/null 2>&1; then
        say "$3 $1 missing: building it"
    elif why="$(stale "$1")"; then
        say "$3 $1 is from an earlier Dockerfile ($why): rebuilding it"
    else
        say "$3 $1 present"
        return 0
    fi
    "$root/docker/build-sandbox-image.sh" --profile "$2" --image "$1" </dev/null \
        || die "building $1 failed (see the output above)"
}
ensure_image "$image" default "sandbox image"
ensure_image "$datascience_image" datascience "data-science image"

if command -v docker-registry >/dev/null 2>&1; then
    say "docker-registry present"
else
    say "installing docker-registry with apt-get (the image pull tests serve a registry on loopback with it)"
    command -v apt-get >/dev/null 2>&1 || die "docker-registry is missing and apt-get is not available: install the distribution project's registry (docker-registry) by hand"
    as_root apt-get update -q </dev/null || die "apt-get update failed"
    as_root apt-get install -y -q --no-install-recommends docker-registry </dev/null || die "apt-get install docker-registry failed"
    # The tests start their own registries; the package's service would
    # listen on :5000 of every interface.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
        as_root systemctl disable --now docker-registry >/dev/null 2>&1 || say "could not stop the docker-registry service"
    fi
fi
say "ready: run the docker tests with CODE_EXEC_REQUIRE_DOCKER=1 go test ./sandbox/docker/"
