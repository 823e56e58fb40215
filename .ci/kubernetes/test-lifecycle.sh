#!/usr/bin/env bash
# Tests .ci/ensure-kubernetes.sh on this machine, for real:
#   1. start (cold or warm), then start again: the second call must find the
#      cluster healthy, restart nothing and print the same kubeconfig path;
#      every component listens on 127.0.0.1 only; the host's sysctls are as
#      before (kubelet's are put back once it has started); codeexec-runs
#      enforces Pod Security "restricted" (a pod running as root is refused);
#      an image whose id changed in Docker is imported again by the next start,
#      and by import;
#   2. check (the smoke check: a locked-down pod, kubectl exec and attach,
#      under runc and under gVisor); a gVisor pod is left running;
#   3. stop, then compare the host with a snapshot taken before the start:
#      processes (gVisor's included), mounts, network links and namespaces,
#      sysctls, cgroups, iptables rules and host paths must be as they were;
#   4. start again and check again (start → stop → start works);
#   5. stop again and compare again, unless --keep (the cluster is then left
#      running, and its kubeconfig path is the last line of stdout).
# Prints the time of each step. Needs root, the Docker Engine and the sandbox
# image (.ci/ensure-docker.sh). A cluster that runs already is stopped first.
#
#   bash .ci/kubernetes/test-lifecycle.sh [--keep]
#
# The machine may be shared: what other programs change meanwhile (Docker's
# containers, links, cgroups and rules; codeexec's process-mode cgroups;
# counters) is left out of the comparison.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$repo/.ci/ensure-kubernetes.sh"
k8s_root="${K8S_TEST_ROOT:-/var/lib/codeexec-k8s}"
gvisor_cache="${RUNSC_CACHE_DIR:-/var/cache/codeexec/gvisor}"
keep=0
[[ ${1:-} == --keep ]] && keep=1
work=$(mktemp -d /tmp/k8s-lifecycle.XXXXXX)
trap 'rm -rf "$work"' EXIT

say() { printf 'test-lifecycle: %s\n' "$*" >&2; }
fail() {
    say "FAIL: $*"
    exit 1
}
timed() { # command... → runs it, says how long it took; stdout kept in $work/out
    local t0=$SECONDS
    "$@" >"$work/out" || fail "$* exited with $?"
    say "$1 ${2:-}: $((SECONDS - t0))s"
}

snapshot() { # dir
    local d=$1
    mkdir -p "$d"
    # Per-interface entries and counters change with every container.
    sysctl -a 2>/dev/null | grep -v -E '^net\.(ipv4|ipv6)\.(conf|neigh)\.|^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.|aio-nr)|kernel\.(ns_last_pid|random\.|pty\.nr)|net\.netfilter\.nf_conntrack_count)' >"$d/sysctl"
    awk '{print $5}' /proc/self/mountinfo | grep -v -E '^(/var/lib/docker|/run/docker|/var/run/docker)/' | sort -u >"$d/mounts"
    ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort -u >"$d/links.all"
    ip -o link show | grep -v -E 'master (docker0|br-)' | awk -F': ' '{print $2}' | cut -d@ -f1 |
        grep -v -E '^br-' | sort -u >"$d/links"
    find /run/netns -mindepth 1 2>/dev/null | sort >"$d/netns" || true
    find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d | grep -v -E '/(docker|codeexec-[0-9]+)$' | sort >"$d/cgroups"
    { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -v -E '^#|DOCKER|docker|br-' |
        sed 's/ \[[0-9]*:[0-9]*\]$//' | sort >"$d/iptables"
    find /etc /opt /run /var/lib /var/log -maxdepth 2 2>/dev/null |
        grep -v -E '^(/run/docker|/var/lib/docker|/run/containerd/s|/run/user|/var/lib/apt|/var/lib/dpkg)(/|$)' |
        sort >"$d/paths"
    # Processes of the cluster: anything run from its cache or state folder.
    local p exe
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        case $exe in
        /var/cache/codeexec/k8s/* | "$gvisor_cache"/* | "$k8s_root"/*) printf '%s %s\n' "${p#/proc/}" "$exe" ;;
        esac
    done >"$d/processes"
}

compare() { # before after
    local f bad=0
    for f in sysctl mounts links netns cgroups iptables paths; do
        if ! diff -u "$1/$f" "$2/$f" >"$work/diff" 2>&1; then
            say "$f differ after stop (- before start, + after stop):"
            grep -E '^[-+][^-+]' "$work/diff" >&2 || true
            bad=1
        fi
    done
    if [[ -s $2/processes ]]; then
        say "processes of the cluster still run after stop:"
        cat "$2/processes" >&2
        bad=1
    fi
    ((bad == 0)) || fail "stop did not put the host back as it was"
    say "after stop the host is as before the start (sysctls, mounts, links, netns, cgroups, iptables, paths, processes)"
}

kubectl() { "$k8s_root/bin/kubectl" --kubeconfig "$kubeconfig" --request-timeout=60s "$@"; }

while_running() {
    local pids bad
    # 1b. a second start finds it healthy and restarts nothing
    local kubelet_pid
    kubelet_pid=$(cut -d' ' -f1 "$k8s_root/pids/kubelet")
    timed "$script" start
    [[ "$(tail -n 1 "$work/out")" == "$kubeconfig" ]] || fail "the second start printed '$(tail -n 1 "$work/out")', not $kubeconfig"
    [[ "$(cut -d' ' -f1 "$k8s_root/pids/kubelet")" == "$kubelet_pid" ]] || fail "the second start restarted kubelet"
    # everything listens on 127.0.0.1 only
    pids=$(cut -d' ' -f1 "$k8s_root"/pids/* | paste -sd'|')
    bad=$(ss -Hltunp | grep -E "pid=($pids)," | awk '$5 !~ /^127\.0\.0\.1:/' || true)
    [[ -z $bad ]] || fail "components listen beyond 127.0.0.1: $bad"
    say "every component listens on 127.0.0.1 only: $(ss -Hltnp | grep -E "pid=($pids)," | awk '{print $4}' | sort -t: -k2 -n | paste -sd' ')"
    # kubelet's sysctls are put back as soon as it has started
    snapshot "$work/running"
    diff -u "$work/before/sysctl" "$work/running/sysctl" >&2 || fail "sysctls differ while the cluster runs"
    say "while the cluster runs, the host's sysctls are as before the start"
    # codeexec-runs refuses a pod that is not "restricted"
    if kubectl -n codeexec-runs run pss-probe --image=docker.io/library/codeexec-sandbox:latest \
        --image-pull-policy=Never --restart=Never --command -- true >"$work/pss" 2>&1; then
        kubectl -n codeexec-runs delete pod pss-probe --wait=false >/dev/null 2>&1 || true
        fail "codeexec-runs accepted a pod that is not Pod Security restricted"
    fi
    grep -q 'violates PodSecurity "restricted' "$work/pss" || fail "the root pod was refused for another reason: $(cat "$work/pss")"
    say "codeexec-runs refuses a pod that violates Pod Security restricted"
    reimport
    # 2. smoke check
    timed "$script" check
    # a gVisor pod (sandbox, gofer, shim) that stop must take down
    sed -e 's|@NAME@|lifecycle-gvisor|' -e 's|@IMAGE@|docker.io/library/codeexec-sandbox:latest|' \
        -e 's|@PROGRAM@|import time; time.sleep(3600)|' -e 's|@STDIN@|false|g' -e 's|@RUNTIME_CLASS@|gvisor|' \
        "$repo/.ci/kubernetes/smoke-pod.yaml" | kubectl apply -f - >/dev/null || fail "creating a gVisor pod failed"
    kubectl -n codeexec-runs wait pod/lifecycle-gvisor --for=condition=Ready --timeout=180s >/dev/null ||
        fail "the gVisor pod lifecycle-gvisor did not become Ready"
    say "a gVisor pod runs: $(pgrep -fc -- "--root=$k8s_root/containerd/runsc-root/") of gVisor's processes"
}

# imported_id REF: the config digest (= Docker's image id) of REF in the
# cluster's containerd.
imported_id() {
    local digest
    digest=$(ctr images ls | awk -v r="$1" '$1 == r {print $3}')
    [[ -n $digest ]] || return 0
    ctr content get "$digest" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])'
}
ctr() { "$k8s_root/bin/ctr" --address "$k8s_root/containerd/containerd.sock" --namespace k8s.io "$@"; }

# 1c. an image whose id changes in Docker is imported again by the next start,
# or import (one the test makes from the sandbox image, removed from Docker and
# from the cluster at the end).
reimport() {
    local tag="codeexec-k8s-lifecycle:$$" ref="docker.io/library/codeexec-k8s-lifecycle:$$" n id
    trap 'docker rmi "'"$tag"'" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
    local cmd
    for n in 1 2; do
        printf 'FROM codeexec-sandbox:latest\nLABEL io.codeexec.k8s-lifecycle=%s-%s\n' "$$" "$n" |
            docker build -q -t "$tag" - >/dev/null 2>&1 || fail "docker build of $tag failed"
        id=$(docker image inspect --format '{{.Id}}' "$tag")
        cmd=start
        ((n == 2)) && cmd=import
        K8S_TEST_IMAGES="codeexec-sandbox:latest $tag" timed "$script" "$cmd"
        [[ "$(imported_id "$ref")" == "$id" ]] ||
            fail "after $cmd, containerd's $ref is '$(imported_id "$ref")', not Docker's $id"
        say "$cmd imported $tag ($id) into the cluster's containerd"
    done
    docker rmi "$tag" >/dev/null
    ctr images rm "$ref" >/dev/null
}

start_and_check() { # label
    timed "$script" start
    kubeconfig=$(tail -n 1 "$work/out")
    [[ -f $kubeconfig ]] || fail "the last line of start's stdout is not a kubeconfig: '$kubeconfig'"
    kubectl get node localhost >/dev/null || fail "kubectl get node with $kubeconfig failed"
    while_running
}

[[ "$(id -u)" == 0 ]] || fail "needs root"
if [[ -e $k8s_root ]]; then
    say "a cluster is there: stopping it first"
    timed "$script" stop
fi
snapshot "$work/before"
start_and_check
timed "$script" stop
snapshot "$work/after1"
compare "$work/before" "$work/after1"
start_and_check
if ((keep)); then
    kubectl -n codeexec-runs delete pod lifecycle-gvisor --wait=true --timeout=180s >/dev/null ||
        fail "deleting the gVisor pod lifecycle-gvisor failed"
    say "PASS; the cluster is left running"
    printf '%s\n' "$kubeconfig"
    exit 0
fi
timed "$script" stop
snapshot "$work/after2"
compare "$work/before" "$work/after2"
say "PASS"
