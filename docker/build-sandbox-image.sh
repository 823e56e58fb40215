#!/usr/bin/env bash
# Builds an image that codeexec's docker mode runs code in, on a host that
# may not be able to pull base images from a registry. (docker mode builds a
# missing codeexec-sandbox:latest or :datascience by itself at start, from
# the same Dockerfile embedded in the binary, on a base it pulls; this
# script is for hosts that cannot pull one, and for other names.)
#
# Usage: docker/build-sandbox-image.sh [--profile default|datascience] [--image NAME]
#
#   --profile default      python3, nodejs, bash, pip, npm → codeexec-sandbox:latest
#   --profile datascience  the same plus Debian's numpy, pandas, matplotlib,
#                          scipy, and the figure hook     → codeexec-sandbox:datascience
#   --image NAME           tag the result NAME instead
#
# Both profiles are stages of sandbox/docker/image/Dockerfile (the one copy,
# which the codeexec binary embeds) on the same base; the data-science one
# starts from the default one, so it reuses its layers.
#
# If the base image is missing, it is bootstrapped from Debian's package
# mirror with debootstrap (installed with apt-get if needed; needs root) and
# imported with `docker import`. The build then uses the classic builder.
#
# Idempotent: an existing base image is reused; the final build is cached.
#
# Environment:
#   CODE_EXEC_DOCKER_IMAGE  image to build with the default profile (default
#                           codeexec-sandbox:latest; --image overrides it)
#   SANDBOX_BASE_IMAGE      base image (default codeexec-debian-base:bookworm)
#   DEBIAN_SUITE            suite for debootstrap (default bookworm)
#   DEBIAN_MIRROR           mirror for debootstrap (default http://deb.debian.org/debian)
#   PULL_BASE=1             use `docker pull debian:bookworm-slim` as the base instead
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
profile=default
image=""
base="${SANDBOX_BASE_IMAGE:-codeexec-debian-base:bookworm}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { printf 'build-sandbox-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) [[ $# -ge 2 ]] || die "--profile needs a value: default or datascience"; profile="$2"; shift 2 ;;
        --profile=*) profile="${1#*=}"; shift ;;
        --image) [[ $# -ge 2 ]] || die "--image needs a value, such as codeexec-sandbox:mine"; image="$2"; shift 2 ;;
        --image=*) image="${1#*=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (accepted: --profile default|datascience, --image NAME, --help)" ;;
    esac
done
case "$profile" in
    default) image="${image:-${CODE_EXEC_DOCKER_IMAGE:-codeexec-sandbox:latest}}" ;;
    datascience) image="${image:-codeexec-sandbox:datascience}" ;;
    *) die "unknown profile \"$profile\" (accepted: default, datascience)" ;;
esac

command -v docker >/dev/null 2>&1 || die "the docker CLI is not installed (run .ci/ensure-docker.sh, or install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker Engine answers (check DOCKER_HOST, or start dockerd; .ci/ensure-docker.sh does both)"

if [[ "${PULL_BASE:-0}" == 1 ]]; then
    base="debian:bookworm-slim"
    log "pulling $base"
    docker pull "$base"
elif docker image inspect "$base" >/dev/null 2>&1; then
    log "base image $base already present"
else
    log "base image $base missing: bootstrapping Debian $suite with debootstrap (about a minute)"
    [[ "$(id -u)" == 0 ]] || die "debootstrap needs root; run this script as root, or set PULL_BASE=1 on a host that can pull debian:bookworm-slim"
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q </dev/null
        apt-get install -y -q --no-install-recommends debootstrap </dev/null
    fi
    rootfs="$(mktemp -d /tmp/codeexec-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2 \
        || die "debootstrap of $suite from $mirror failed"
    # Keep the base small: no package lists or caches in the image.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    tar -C "$rootfs" -c . | docker import \
        --change 'CMD ["/bin/bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$base" >/dev/null || die "docker import of the bootstrapped root filesystem failed"
    rm -rf "$rootfs"
    trap - EXIT
    log "imported base image $base"
fi

# The build context, as docker mode's own build makes it: the Dockerfile and
# the figure hook, each the one copy that the Go code embeds
# (sandbox/docker/image, sandbox/datascience).
dockerfile="$root/sandbox/docker/image/Dockerfile"
context="$(mktemp -d /tmp/codeexec-build.XXXXXX)"
trap 'rm -rf "$context"' EXIT
cp "$dockerfile" "$context/Dockerfile"
cp -R "$root/sandbox/datascience/codeexec_mpl" "$context/codeexec_mpl"
find "$context/codeexec_mpl" -name __pycache__ -prune -exec rm -rf {} +

log "building $image (profile $profile) from $dockerfile (base $base)"
DOCKER_BUILDKIT=0 docker build --force-rm --build-arg "BASE=$base" --target "$profile" -t "$image" "$context" >&2 \
    || die "docker build of $image failed"
log "done: $image ($(docker image inspect --format '{{.Size}}' "$image") bytes)"
