#!/usr/bin/env bash
# Runs tests as an ordinary user, as the people process mode is for run the
# server (an IDE agent, a developer, a CI runner): not root.
#
#   .ci/as-ordinary-user.sh userns     COMMAND...   as the user, as the host allows
#   .ci/as-ordinary-user.sh no-userns  COMMAND...   as the user, who cannot create
#                                                   user namespaces (as with
#                                                   user.max_user_namespaces=0)
#
# Run it as root from the checkout. It creates the user $CI_USER (default
# codeexec-ci) if needed, gives it a copy of this checkout (and ../shared, as
# on CI) and of root's Go module cache, so that nothing is downloaded again, and runs COMMAND there with a clean environment plus the CODE_EXEC_*
# variables passed through. The user cannot reach the Docker Engine, so
# docker-mode tests skip there; docker mode is tested as root.
set -euo pipefail

mode=${1:?usage: as-ordinary-user.sh userns|no-userns COMMAND...}
shift
[[ $# -gt 0 ]] || { echo "as-ordinary-user: no command" >&2; exit 2; }
[[ "$(id -u)" == 0 ]] || { echo "as-ordinary-user: run me as root" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user="${CI_USER:-codeexec-ci}"
say() { printf 'as-ordinary-user: %s\n' "$*" >&2; }

if ! id -u "$user" >/dev/null 2>&1; then
    say "creating the user $user"
    useradd --create-home --shell /bin/bash "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"

# A copy of the checkout that the user owns: the clone may sit where the
# user cannot read (under /root, say).
src="$home/work/main"
rm -rf "$home/work"
mkdir -p "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --no-recursion) | tar -C "$src" -xf -
# git status is what some tests and tools ask.
cp -a "$root/.git" "$src/.git"
if [[ -d "$root/../shared" ]]; then
    cp -a "$root/../shared" "$home/work/shared"
fi

export PATH="/usr/local/go/bin:$PATH"
# The module cache is copied (its files are written once, by atomic
# renames, so a copy is consistent); the build cache is not: a copy taken
# while another go command writes to it can list outputs it does not hold.
# The user builds into a cache of its own, kept between the steps.
gomodcache="$(go env GOMODCACHE)"
mkdir -p "$home/go/pkg" "$home/.cache"
if [[ -d "$gomodcache" ]]; then
    rm -rf "$home/go/pkg/mod"
    cp -a "$gomodcache" "$home/go/pkg/mod"
fi
chown -R "$user:" "$home"

# A clean environment, as a login would give, plus the test switches.
env_args=(HOME="$home" USER="$user" LOGNAME="$user" PATH="/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"
    GOFLAGS="${GOFLAGS:-}" GOPROXY=off GOTOOLCHAIN=local CI="${CI:-}" LANG=C.UTF-8)
while IFS= read -r kv; do
    env_args+=("$kv")
done < <(env | grep '^CODE_EXEC_' || true)

cmd=(env -i "${env_args[@]}" sh -c 'cd "$1" && shift && exec "$@"' sh "$src" "$@")
case "$mode" in
userns)
    say "as $user (uid $(id -u "$user")): $*"
    exec setpriv --reuid="$user" --regid="$user" --init-groups "${cmd[@]}"
    ;;
no-userns)
    nouserns="$(mktemp -d)/nouserns"
    (cd "$root" && go build -o "$nouserns" ./.ci/nouserns)
    say "as $user (uid $(id -u "$user")), without user namespaces: $*"
    "$nouserns" "$user" "${cmd[@]}"
    ;;
*)
    echo "as-ordinary-user: unknown mode $mode (userns or no-userns)" >&2
    exit 2
    ;;
esac
