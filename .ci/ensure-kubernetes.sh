#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for codeexec's
# kubernetes-mode tests: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and a private containerd, all on 127.0.0.1, no
# container registry (images are imported from the local Docker Engine).
#
#   .ci/ensure-kubernetes.sh [start]  make the cluster (or check the running one is
#                                     healthy); the last line of stdout is the path
#                                     of its admin kubeconfig, everything else goes
#                                     to stderr
#   .ci/ensure-kubernetes.sh check    smoke check of the running cluster: a locked-down
#                                     pod of the sandbox image runs print(2**64);
#                                     kubectl exec and kubectl attach into another;
#                                     the same again under gVisor (RuntimeClass gvisor)
#   .ci/ensure-kubernetes.sh stop     stop everything it started and restore every
#                                     host setting it changed (sysctls, cgroups,
#                                     mounts, links, iptables chains, host paths)
#   .ci/ensure-kubernetes.sh import   import the images (K8S_TEST_IMAGES) into the
#                                     running, healthy cluster, and nothing else: never
#                                     a restart, even when the cluster was started from
#                                     other inputs (for tests, on a cluster others share)
#
# Idempotent and non-interactive (CI=true, no stdin); needs root. What it
# needs comes from Debian: etcd-server, containerd, runc and
# containernetworking-plugins are downloaded with apt-get download and
# unpacked (dpkg -x) into the machine's cache, never installed as services;
# openssl, iproute2, iptables, python3 and curl are installed with apt-get
# when missing. Kubernetes itself (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl) is built from the Go module proxy
# (.ci/kubernetes/wrap) and cached by the hash of its inputs, with the pause
# image and crireset, under $K8S_TEST_CACHE/<hash>. gVisor's runsc and its
# containerd shim are docker mode's build (docker/install-gvisor.sh
# --build-only, cached by the hash of its inputs); the RuntimeClass gvisor
# runs pods under them (containerd's runtime handler runsc). The sandbox image
# (codeexec-sandbox:latest) is imported from the Docker Engine into the
# private containerd as docker.io/library/codeexec-sandbox:latest (pods use
# imagePullPolicy: Never), again whenever its image id changes. The namespace
# codeexec-runs enforces Pod Security "restricted". See docs/development.md.
#
# Settings (environment):
#   K8S_TEST_ROOT          the cluster's state, removed by stop (/var/lib/codeexec-k8s)
#   K8S_TEST_CACHE         built binaries and unpacked Debian packages, kept (/var/cache/codeexec/k8s)
#   RUNSC_CACHE_DIR        gVisor's builds, kept (docker/install-gvisor.sh's: /var/cache/codeexec/gvisor)
#   K8S_TEST_IMAGES        Docker images to import (${CODE_EXEC_DOCKER_IMAGE:-codeexec-sandbox:latest});
#                          the first one is the smoke check's
#   K8S_TEST_WAIT_SECONDS  bound on each wait for a component, node or pod (180)
#   K8S_TEST_STEP_SECONDS  bound on each long step: Debian downloads, the build,
#                          an image import (3600)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kdir="$repo/.ci/kubernetes"
k8s_root="${K8S_TEST_ROOT:-/var/lib/codeexec-k8s}"
cache="${K8S_TEST_CACHE:-/var/cache/codeexec/k8s}"
images="${K8S_TEST_IMAGES:-${CODE_EXEC_DOCKER_IMAGE:-codeexec-sandbox:latest}}"
wait_seconds="${K8S_TEST_WAIT_SECONDS:-180}"
step_seconds="${K8S_TEST_STEP_SECONDS:-3600}"

k8s_version=v1.37.2
# The configuration files in .ci/kubernetes/ the cluster is made from.
config_files=(containerd.toml runsc.toml containerd-shim-runsc-v1 cni.conflist kubelet.yaml namespace.yaml)
# The RuntimeClass gvisor: the optional one of deploy/kubernetes/.
runtimeclass="$repo/deploy/kubernetes/runtimeclass-gvisor.yaml"
node=localhost
namespace=codeexec-runs
apiserver_port=26443
etcd_ports=(23790 23800 23810) # client, peer, metrics
kcm_port=20257
scheduler_port=20259
bridge=k8sbr0
kubeconfig="$k8s_root/admin.kubeconfig"
socket="$k8s_root/containerd/containerd.sock"
components=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet)
# Host settings kubelet and the CNI plugins may change (kubelet sets the
# first six as it starts): saved at start, put back once kubelet has started
# and again by stop.
host_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
    net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables)
# Host paths kubelet, containerd and the CNI plugins use whatever their flags
# say; stop removes the ones that did not exist at start: its own with what
# is in them, the ones others may use too (Docker's containerd shares
# /run/containerd/s) only when empty, deepest first.
own_host_paths=(/var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /etc/cni /opt/cni)
shared_host_paths=(/run/netns /run/containerd/runc /run/containerd/fifo /run/containerd/s /run/containerd)

export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
# fd 3 is the caller's stdout, for the kubeconfig's path alone; everything
# else, ours and every command's, goes to stderr.
exec 3>&1 1>&2

say() { printf 'ensure-kubernetes: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
tail_log() { # file
    [[ -s $1 ]] || return 0
    say "last lines of $1:"
    tail -n 25 "$1" >&2 || true
}
log_of() { printf '%s/logs/%s.log' "$k8s_root" "$1"; }
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
}

# ---------------------------------------------------------------- processes

# launch NAME CMD...: starts a component in a session of its own, so it
# outlives this script; its pid and start time are recorded (a pid alone
# could be reused). It keeps no file descriptor of ours besides its log: not
# our stdout (fd 3), not the lock (fd 9), not a pipe of the caller's (which
# would keep a CI step or $(...) waiting for the cluster to end).
launch() {
    local name=$1
    shift
    (
        for fd in /proc/"$BASHPID"/fd/*; do
            fd=${fd##*/}
            if ((fd > 2)) && [[ -e /proc/$BASHPID/fd/$fd ]]; then exec {fd}>&-; fi
        done
        exec setsid "$@"
    ) >>"$(log_of "$name")" 2>&1 </dev/null &
    local pid=$!
    printf '%s %s\n' "$pid" "$(start_time "$pid")" >"$k8s_root/pids/$name"
    say "started $name (pid $pid, log $(log_of "$name"))"
}
# start_time PID: the process's start time (clock ticks since boot), empty
# once it has exited (a zombie has exited too).
start_time() {
    local stat
    stat=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 0
    [[ $stat == Z* ]] || cut -d' ' -f20 <<<"$stat"
}
# pid_of NAME: sets REPLY to the pid of the component if it still runs.
pid_of() {
    local pid started
    REPLY=
    [[ -r $k8s_root/pids/$1 ]] || return 1
    read -r pid started <"$k8s_root/pids/$1" || return 1
    [[ -n $pid && -n $started && "$(start_time "$pid")" == "$started" ]] || return 1
    REPLY=$pid
}
alive() { pid_of "$1"; }

# wait_for WHAT COMPONENT CMD...: polls CMD every second until it succeeds,
# for at most $wait_seconds; gives up early when COMPONENT (if any) exits.
# Either way it says what it waited for, with the last lines of the log.
wait_for() {
    local what=$1 comp=$2
    shift 2
    local deadline=$((SECONDS + wait_seconds))
    until "$@" >/dev/null 2>&1; do
        if [[ -n $comp ]] && ! alive "$comp"; then
            tail_log "$(log_of "$comp")"
            die "$comp exited while waiting for $what"
        fi
        if ((SECONDS >= deadline)); then
            [[ -n $comp ]] && tail_log "$(log_of "$comp")"
            die "gave up after ${wait_seconds}s waiting for $what"
        fi
        sleep 1
    done
}

# stop_components NAME...: SIGTERM to each, then SIGKILL to those that have
# not exited after 30 s.
stop_components() {
    local c c2 pids=() deadline=$((SECONDS + 30)) killed=0
    for c in "$@"; do
        pid_of "$c" || continue
        pids+=("$c:$REPLY")
        kill -TERM "$REPLY" 2>/dev/null || true
    done
    for c in "${pids[@]}"; do
        while alive "${c%%:*}"; do
            if ((SECONDS >= deadline && !killed)); then
                say "${c%%:*} (pid ${c#*:}) ignored SIGTERM for 30s: killing what is left of $*"
                for c2 in "$@"; do
                    if pid_of "$c2"; then kill -KILL "$REPLY" 2>/dev/null || true; fi
                done
                killed=1
            fi
            sleep 0.2
        done
        say "stopped ${c%%:*} (pid ${c#*:})"
    done
}

kc() { "$k8s_root/bin/kubectl" --kubeconfig "$kubeconfig" --request-timeout=60s "$@"; }
# For exec and attach, whose streams --request-timeout would cut.
kc_stream() { timeout "$wait_seconds" "$k8s_root/bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
ctr_k8s() { "$k8s_root/bin/ctr" --address "$socket" --namespace k8s.io "$@"; }

# --------------------------------------------------------- what it needs

need_root() {
    [[ "$(id -u)" == 0 ]] || die "needs root (it runs kubelet and containerd and changes host settings)"
    [[ "$(uname -s)" == Linux ]] || die "needs Linux"
    [[ "$(uname -m)" == x86_64 ]] || die "is written for amd64 (x86_64), not $(uname -m)"
}

apt_updated=0
apt_update() {
    ((apt_updated)) && return 0
    say "apt-get update"
    timeout "$step_seconds" apt-get update -q </dev/null || die "apt-get update failed"
    apt_updated=1
}

ensure_host_tools() {
    local missing=()
    command -v openssl >/dev/null || missing+=(openssl)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v iptables >/dev/null || missing+=(iptables)
    command -v curl >/dev/null || missing+=(curl)
    [[ -x /usr/bin/python3 ]] || missing+=(python3)
    if ! command -v dpkg >/dev/null || ! command -v apt-get >/dev/null; then
        die "needs Debian's apt-get and dpkg"
    fi
    if ((${#missing[@]})); then
        apt_update
        say "installing ${missing[*]} with apt-get"
        timeout "$step_seconds" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null ||
            die "apt-get install ${missing[*]} failed"
    fi
    command -v go >/dev/null || die "needs Go (go on PATH or /usr/local/go/bin) to build Kubernetes"
    if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
        die "the Docker Engine does not answer; the sandbox image is imported from it: run .ci/ensure-docker.sh first"
    fi
}

# deb PACKAGE: sets REPLY to the folder where Debian's PACKAGE (the
# candidate version) is unpacked in the cache, downloading it if needed.
deb() {
    local pkg=$1 ver dir tmp
    ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [[ -z $ver || $ver == "(none)" ]]; then
        apt_update
        ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    fi
    [[ -n $ver && $ver != "(none)" ]] || die "Debian's package lists have no $pkg"
    dir="$cache/debs/${pkg}_${ver//:/%}"
    if [[ ! -e $dir/.unpacked ]]; then
        say "downloading Debian's $pkg $ver (apt-get download, unpacked into $dir, not installed)"
        mkdir -p "$cache/debs"
        tmp=$(mktemp -d "$cache/debs/.download.XXXXXX")
        if ! (cd "$tmp" && timeout "$step_seconds" apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" </dev/null); then
            apt_update
            (cd "$tmp" && timeout "$step_seconds" apt-get download -q -o APT::Sandbox::User=root "$pkg=$ver" </dev/null) ||
                { rm -rf "$tmp"; die "apt-get download $pkg=$ver failed"; }
        fi
        dpkg -x "$tmp"/*.deb "$tmp/root" || { rm -rf "$tmp"; die "dpkg -x of $pkg failed"; }
        touch "$tmp/root/.unpacked"
        rm -rf "$dir"
        mv "$tmp/root" "$dir"
        rm -rf "$tmp"
    fi
    REPLY=$dir
}

etcd_dir='' containerd_dir='' runc_dir='' cni_dir=''
ensure_debs() {
    deb etcd-server && etcd_dir=$REPLY
    deb containerd && containerd_dir=$REPLY
    deb runc && runc_dir=$REPLY
    deb containernetworking-plugins && cni_dir=$REPLY
    [[ -x $etcd_dir/usr/bin/etcd && -x $containerd_dir/usr/bin/containerd && -x $runc_dir/usr/sbin/runc &&
        -x $cni_dir/usr/lib/cni/bridge ]] || die "the unpacked Debian packages in $cache/debs lack a binary"
}

# What the built binaries depend on: their hash names the cache folder.
build_goflags="-p=2 -buildvcs=false -mod=readonly -trimpath"
build_ldflags="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    build_ldflags+=" -X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean"
done
build_cmds=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
    ./pause ./crireset)
build_hash() {
    (
        cd "$kdir"
        printf '%s\n' "$k8s_version" "$(go version)" "$(go env GOOS GOARCH)" \
            "CGO_ENABLED=0 $build_goflags" "$build_ldflags" "${build_cmds[@]}"
        find wrap mkoci.py -type f | LC_ALL=C sort | xargs sha256sum
    ) | sha256sum | cut -c1-16
}

bin_dir=
ensure_binaries() {
    local hash tmp t0
    hash=$(build_hash)
    bin_dir="$cache/$hash"
    if [[ -e $bin_dir/.built ]]; then
        say "Kubernetes $k8s_version binaries: cached in $bin_dir"
        return 0
    fi
    say "building Kubernetes $k8s_version from the Go module proxy into $bin_dir (about 10 minutes on 2 cores; bound ${step_seconds}s)"
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.build.XXXXXX")
    t0=$SECONDS
    if ! (cd "$kdir/wrap" && env CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="$build_goflags" \
        timeout "$step_seconds" go build -ldflags="$build_ldflags" -o "$tmp/" "${build_cmds[@]}" </dev/null); then
        rm -rf "$tmp"
        die "building Kubernetes failed or took more than ${step_seconds}s (see go's output above)"
    fi
    say "built in $(elapsed $((SECONDS - t0)))"
    # The pod sandbox image, registry.k8s.io/pause:3.10 in containerd's config.
    mkdir -p "$tmp/pause-rootfs"
    cp "$tmp/pause" "$tmp/pause-rootfs/pause"
    /usr/bin/python3 "$kdir/mkoci.py" "$tmp/pause-rootfs" "$tmp/pause.tar" registry.k8s.io/pause:3.10 '["/pause"]' ||
        { rm -rf "$tmp"; die "making the pause image failed"; }
    rm -rf "$tmp/pause-rootfs"
    touch "$tmp/.built"
    rm -rf "$bin_dir"
    mv "$tmp" "$bin_dir"
}

# gVisor: runsc and containerd-shim-runsc-v1 as docker mode builds them, at
# the same version with the same patches (one of them for the shim, which
# cannot lower its OOM score here); built once, then taken from the cache.
gvisor_dir=
ensure_gvisor() {
    gvisor_dir=$(timeout "$step_seconds" bash "$repo/docker/install-gvisor.sh" --build-only </dev/null | tail -n 1) ||
        die "building gVisor (docker/install-gvisor.sh --build-only) failed or took more than ${step_seconds}s"
    [[ -x $gvisor_dir/runsc && -x $gvisor_dir/containerd-shim-runsc-v1 ]] ||
        die "docker/install-gvisor.sh --build-only named '$gvisor_dir', which lacks runsc or containerd-shim-runsc-v1"
    say "gVisor: runsc and containerd-shim-runsc-v1 from $gvisor_dir"
}

# The inputs of a running cluster: the binaries, this script and the
# configuration files. A cluster started from other inputs is restarted.
state_hash() {
    {
        printf '%s\n' "$bin_dir" "$etcd_dir" "$containerd_dir" "$runc_dir" "$cni_dir" "$gvisor_dir"
        sha256sum <"${BASH_SOURCE[0]}"
        (cd "$kdir" && sha256sum "${config_files[@]}")
        sha256sum <"$runtimeclass"
    } | sha256sum | cut -c1-16
}

# ----------------------------------------------------------- host state

# Saved once, when the state folder is made; stop puts these back.
save_host_state() {
    local h="$k8s_root/host" s v p cmd t dir
    mkdir -p "$h"
    : >"$h/sysctl"
    for s in "${host_sysctls[@]}"; do
        v=$(sysctl -n "$s" 2>/dev/null) && printf '%s=%s\n' "$s" "$v" >>"$h/sysctl"
    done
    : >"$h/paths"
    for p in "${own_host_paths[@]}" "${shared_host_paths[@]}"; do
        [[ -e $p ]] && printf '%s\n' "$p" >>"$h/paths"
    done
    find /run/netns -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null >"$h/netns" || true
    : >"$h/chains"
    for cmd in iptables ip6tables; do
        command -v "$cmd" >/dev/null || continue
        for t in filter nat mangle; do
            "$cmd" -t "$t" -S 2>/dev/null | awk -v c="$cmd" -v t="$t" '$1 == "-N" {print c, t, $2}' >>"$h/chains" || true
        done
    done
    touch "$h/saved"
}

check_host_free() {
    local p
    ip link show "$bridge" >/dev/null 2>&1 && die "a network link $bridge exists already (another cluster?); remove it first"
    for p in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
        [[ -d $p ]] && die "$p exists: another kubelet runs on this machine"
    done
    for p in "$apiserver_port" "${etcd_ports[@]}" "$kcm_port" "$scheduler_port" 20250 20248; do
        if [[ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]]; then
            die "127.0.0.1:$p is taken: another program listens there"
        fi
    done
}

mounts_under() { # prefix: mount points at or below it, deepest first
    awk -v p="$1" '$5 == p || index($5, p "/") == 1 {print $5}' /proc/self/mountinfo |
        awk '{print length($0), $0}' | sort -rn | cut -d' ' -f2-
}
# Network namespaces the CRI plugin made (cni-*) that were not there at start.
our_netns() {
    local n
    for n in /run/netns/cni-*; do
        [[ -e $n ]] || continue
        grep -qxF "${n##*/}" "$k8s_root/host/netns" 2>/dev/null || printf '%s\n' "$n"
    done
}
kubepods_cgroups() {
    local d
    for d in /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods; do
        [[ -d $d ]] && printf '%s\n' "$d"
    done
}
# containerd's shims left running: their command line names our socket and
# their executable is a shim in the cache (runc's, or gVisor's); and gVisor's
# processes (sandbox, gofer) that name our runsc root.
our_shims() {
    local pid exe
    for pid in $(pgrep -f -- " -address $socket" || true); do
        exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
        [[ $exe == */containerd-shim-runc-v2 || $exe == */containerd-shim-runsc-v1 ]] && printf '%s\n' "$pid"
    done
    pgrep -f -- "--root=$k8s_root/containerd/runsc-root/" || true
}
pod_processes() {
    local d
    for d in $(kubepods_cgroups); do
        find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done | sort -un
}
describe_pid() { printf 'pid %s: %s' "$1" "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | cut -c1-120)"; }

# ------------------------------------------------------------------ start

render() { # template → stdout, with @K8S_ROOT@ and friends filled in
    sed -e "s|@K8S_ROOT@|$k8s_root|g" -e "s|@RUNC@|$k8s_root/bin/runc|g" \
        -e "s|@CNI_BIN@|$cni_dir/usr/lib/cni|g" -e "s|@SHIM@|$gvisor_dir/containerd-shim-runsc-v1|g" "$1"
}

gen_certs() {
    local pki="$k8s_root/pki"
    (
        cd "$pki"
        openssl genrsa -out ca.key 2048
        openssl req -x509 -new -nodes -key ca.key -subj "/CN=codeexec-k8s-ca" -days 3650 -out ca.crt
        sign() { # name subject [subjectAltName]
            openssl genrsa -out "$1.key" 2048
            openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
            if [[ -n ${3:-} ]]; then
                printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
            else
                printf 'extendedKeyUsage=clientAuth\n' >"$1.ext"
            fi
            openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
                -extfile "$1.ext" -out "$1.crt"
        }
        sign apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
        sign admin "/O=system:masters/CN=kubernetes-admin"
        sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
        sign controller-manager "/CN=system:kube-controller-manager"
        sign scheduler "/CN=system:kube-scheduler"
        sign kubelet "/O=system:nodes/CN=system:node:$node" "IP:127.0.0.1,DNS:$node"
        openssl genrsa -out sa.key 2048
        openssl rsa -in sa.key -pubout -out sa.pub
        chmod 600 ./*.key
    ) >/dev/null 2>&1 || die "openssl failed to make the cluster's certificates"
    local n
    for n in admin controller-manager scheduler kubelet; do
        cat >"$k8s_root/$n.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: $pki/ca.crt
    server: https://127.0.0.1:$apiserver_port
  name: codeexec-k8s
contexts:
- context: {cluster: codeexec-k8s, user: $n}
  name: codeexec-k8s
current-context: codeexec-k8s
users:
- name: $n
  user:
    client-certificate: $pki/$n.crt
    client-key: $pki/$n.key
EOF
    done
}

etcd_healthy() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:${etcd_ports[0]}/health")" == *'"health":"true"'* ]]; }
apiserver_ready() { kc get --raw=/readyz >/dev/null; }
node_ready() {
    [[ "$(kc get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
containerd_up() { "$k8s_root/bin/ctr" --address "$socket" version >/dev/null; }
default_sa() { kc -n "$namespace" get serviceaccount default >/dev/null; }

start_control_plane() {
    local k="$k8s_root" p="$k8s_root/pki"
    launch etcd "$k/bin/etcd" --name codeexec-k8s --data-dir "$k/etcd" \
        --listen-client-urls "http://127.0.0.1:${etcd_ports[0]}" \
        --advertise-client-urls "http://127.0.0.1:${etcd_ports[0]}" \
        --listen-peer-urls "http://127.0.0.1:${etcd_ports[1]}" \
        --initial-advertise-peer-urls "http://127.0.0.1:${etcd_ports[1]}" \
        --initial-cluster "codeexec-k8s=http://127.0.0.1:${etcd_ports[1]}" \
        --listen-metrics-urls "http://127.0.0.1:${etcd_ports[2]}" \
        --logger zap --log-outputs stderr
    wait_for "etcd to answer on 127.0.0.1:${etcd_ports[0]}" etcd etcd_healthy

    launch kube-apiserver "$k/bin/kube-apiserver" \
        --advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$apiserver_port" \
        --etcd-servers="http://127.0.0.1:${etcd_ports[0]}" \
        --service-cluster-ip-range=10.96.0.0/24 --endpoint-reconciler-type=none \
        --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
        --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$p/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=Hostname \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
        --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
        --profiling=false
    wait_for "kube-apiserver to be ready (/readyz on 127.0.0.1:$apiserver_port)" kube-apiserver apiserver_ready

    launch kube-controller-manager "$k/bin/kube-controller-manager" \
        --kubeconfig="$k/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$kcm_port" --leader-elect=false \
        --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
        --use-service-account-credentials=true \
        --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
        --profiling=false
    launch kube-scheduler "$k/bin/kube-scheduler" \
        --kubeconfig="$k/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$scheduler_port" --leader-elect=false \
        --profiling=false
}

start_node() {
    local k="$k8s_root"
    # PATH: containerd finds containerd-shim-runc-v2 and
    # containerd-shim-runsc-v1 there, the shim runc.
    launch containerd env PATH="$k/bin:$PATH" "$k/bin/containerd" --config "$k/containerd/config.toml"
    wait_for "containerd to answer on $socket" containerd containerd_up
    ctr_k8s images import "$bin_dir/pause.tar" >/dev/null || die "importing the pause image failed"
    import_images
    launch kubelet "$k/bin/kubelet" --config="$k/kubelet/config.yaml" \
        --kubeconfig="$k/kubelet.kubeconfig" --root-dir="$k/kubelet/root" --hostname-override="$node"
    wait_for "node $node to register and be Ready" kubelet node_ready
    # kubelet sets vm.overcommit_memory=1, kernel.panic=10 and
    # kernel.panic_on_oops=1 once, as it starts, and never looks again: put
    # them back at once, so that the machine's other tests (and its kernel's
    # reaction to an oops) do not change while the cluster runs.
    restore_sysctls
}

# normalize_ref REF: sets REPLY to the fully qualified name containerd and
# kubelet give REF (codeexec-sandbox:latest → docker.io/library/codeexec-sandbox:latest).
normalize_ref() {
    local r=$1 first
    if [[ $r != */* ]]; then
        r="docker.io/library/$r"
    else
        first=${r%%/*}
        [[ $first == *.* || $first == *:* || $first == localhost ]] || r="docker.io/$r"
        [[ $r == docker.io/*/* ]] || r="docker.io/library/${r#docker.io/}"
    fi
    [[ ${r##*/} == *[:@]* ]] || r="$r:latest"
    REPLY=$r
}

# has_image REF: containerd lists REF (grep reads all: with pipefail, grep -q
# could fail the pipeline by closing it under ctr).
has_image() { ctr_k8s images ls -q | grep -xF "$1" >/dev/null; }

# Imports each of $images from the Docker Engine unless containerd has that
# very image id already.
import_images() {
    local img id ref state t0
    for img in $images; do
        id=$(docker image inspect --format '{{.Id}}' "$img" 2>/dev/null) ||
            die "Docker has no image $img: run .ci/ensure-docker.sh first"
        normalize_ref "$img"
        ref=$REPLY
        state="$k8s_root/images/${ref//[\/:@]/_}.id"
        if [[ -e $state && "$(cat "$state")" == "$id" ]] && has_image "$ref"; then
            say "$ref: image $id already imported"
            continue
        fi
        say "importing $img ($id) from the Docker Engine into the private containerd as $ref"
        t0=$SECONDS
        # shellcheck disable=SC2016 # expanded by the inner bash
        timeout "$step_seconds" bash -o pipefail -c 'docker save "$1" | "$2" --address "$3" --namespace k8s.io images import -' \
            _ "$img" "$k8s_root/bin/ctr" "$socket" >/dev/null ||
            die "importing $img into containerd failed or took more than ${step_seconds}s"
        has_image "$ref" || die "containerd does not list $ref after importing $img"
        printf '%s\n' "$id" >"$state"
        say "imported $ref in $(elapsed $((SECONDS - t0)))"
    done
}

# The namespace of the runs, and the RuntimeClass gvisor.
apply_manifests() {
    kc apply -f "$kdir/namespace.yaml" >/dev/null || die "creating namespace $namespace failed"
    kc apply -f "$runtimeclass" >/dev/null || die "creating the RuntimeClass gvisor failed"
    wait_for "the controller manager to make the default ServiceAccount of $namespace" kube-controller-manager default_sa
}

fresh_start() {
    local k="$k8s_root" b
    check_host_free
    mkdir -p "$k"
    chmod 700 "$k"
    mkdir -p "$k"/{bin,pki,logs,pids,images,etcd,containerd/runsc-root,cni/net.d,cni/ipam,kubelet/root,kubelet/pod-logs}
    save_host_state
    for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl crireset; do
        ln -sfn "$bin_dir/$b" "$k/bin/$b"
    done
    ln -sfn "$etcd_dir/usr/bin/etcd" "$k/bin/etcd"
    for b in containerd containerd-shim-runc-v2 ctr; do
        ln -sfn "$containerd_dir/usr/bin/$b" "$k/bin/$b"
    done
    ln -sfn "$runc_dir/usr/sbin/runc" "$k/bin/runc"
    ln -sfn "$gvisor_dir/runsc" "$k/bin/runsc"
    render "$kdir/containerd-shim-runsc-v1" >"$k/bin/containerd-shim-runsc-v1"
    chmod 755 "$k/bin/containerd-shim-runsc-v1"
    render "$kdir/containerd.toml" >"$k/containerd/config.toml"
    render "$kdir/runsc.toml" >"$k/containerd/runsc.toml"
    render "$kdir/cni.conflist" >"$k/cni/net.d/10-codeexec-k8s.conflist"
    render "$kdir/kubelet.yaml" >"$k/kubelet/config.yaml"
    gen_certs
    start_control_plane
    start_node
    apply_manifests
    state_hash >"$k/inputs"
}

# healthy: sets REPLY to what is wrong when it returns 1.
healthy() {
    local c
    for c in "${components[@]}"; do
        alive "$c" || { REPLY="$c is not running"; return 1; }
    done
    apiserver_ready 2>/dev/null || { REPLY="kube-apiserver is not ready"; return 1; }
    node_ready 2>/dev/null || { REPLY="node $node is not Ready"; return 1; }
    REPLY=
}

start() {
    local t0=$SECONDS inputs
    ensure_host_tools
    ensure_debs
    ensure_binaries
    ensure_gvisor
    inputs=$(state_hash)
    if [[ -e $k8s_root/inputs ]]; then
        if [[ "$(cat "$k8s_root/inputs")" != "$inputs" ]]; then
            say "the cluster in $k8s_root was started from other binaries or files: restarting it"
            stop
        elif healthy; then
            say "the cluster in $k8s_root runs and is healthy"
            import_images
            apply_manifests
            printf '%s\n' "$kubeconfig" >&3
            return 0
        else
            say "the cluster in $k8s_root is not healthy ($REPLY): restarting it"
            stop
        fi
    elif [[ -e $k8s_root ]]; then
        say "$k8s_root holds a cluster that did not finish starting: removing it first"
        stop
    fi
    say "starting a single-node cluster in $k8s_root"
    fresh_start
    say "cluster up in $(elapsed $((SECONDS - t0))); smoke check"
    smoke_check
    say "ready in $(elapsed $((SECONDS - t0))): KUBECONFIG=$kubeconfig"
    printf '%s\n' "$kubeconfig" >&3
}

# ------------------------------------------------------------ smoke check

smoke_pod() { # name program stdin(true|false) runtime-class(null: the default) → applied
    local image
    normalize_ref "${images%% *}"
    image=$REPLY
    sed -e "s|@NAME@|$1|" -e "s|@IMAGE@|$image|" -e "s|@PROGRAM@|$2|" -e "s|@STDIN@|$3|g" \
        -e "s|@RUNTIME_CLASS@|$4|" "$kdir/smoke-pod.yaml" | kc apply -f - >/dev/null ||
        die "creating pod $namespace/$1 failed"
}
pod_diagnostics() { # pod
    kc -n "$namespace" describe pod "$1" >&2 || true
    kc -n "$namespace" logs "$1" >&2 || true
    tail_log "$(log_of kubelet)"
    tail_log "$(log_of containerd)"
}
smoke_fail() { # pod message
    pod_diagnostics "$1"
    die "smoke check: $2"
}
delete_smoke_pods() {
    kc -n "$namespace" delete pod -l app.kubernetes.io/managed-by=ensure-kubernetes \
        --ignore-not-found --wait=true --timeout="${wait_seconds}s" >/dev/null ||
        die "deleting the smoke check's pods took more than ${wait_seconds}s"
}
# wait_terminated POD: waits (kubectl wait, bounded) until its container ended.
wait_terminated() {
    kc -n "$namespace" wait "pod/$1" --timeout="${wait_seconds}s" \
        --for=jsonpath='{.status.containerStatuses[0].state.terminated}' >/dev/null ||
        smoke_fail "$1" "gave up after ${wait_seconds}s waiting for pod $1 to run to its end"
    local reason
    reason=$(kc -n "$namespace" get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.terminated.reason}')
    [[ $reason == Completed ]] || smoke_fail "$1" "pod $1 ended with $reason, not Completed"
}

# smoke_round RUNTIME RUNTIME_CLASS (null: the cluster's default): pods of
# that runtime, named smoke-*-RUNTIME, as kubernetes mode uses them.
smoke_round() {
    local rc=$2 out kernel want
    local run=smoke-run-${1,,} attach=smoke-attach-${1,,} under="under $1"
    # 1. a one-shot run, as a cold run of codeexec's kubernetes mode; its
    # kernel tells which runtime ran it (gVisor's release ends in -gvisor)
    smoke_pod "$run" 'import os; print(2**64); print(os.uname().release)' false "$rc"
    wait_terminated "$run"
    out=$(kc -n "$namespace" logs "$run") || smoke_fail "$run" "kubectl logs failed"
    kernel=${out#*$'\n'}
    [[ ${out%%$'\n'*} == 18446744073709551616 ]] ||
        smoke_fail "$run" "the pod printed '$out', not 18446744073709551616 and its kernel's release"
    if [[ $rc == null ]]; then want=$(uname -r); else want='*-gvisor'; fi
    # shellcheck disable=SC2053 # $want is a pattern under gVisor
    [[ $kernel == $want ]] || smoke_fail "$run" "the pod ran $under on a kernel '$kernel', not '$want'"
    say "smoke check: a locked-down pod $under (kernel $kernel) printed 2**64 = ${out%%$'\n'*}"
    # 2. exec and attach (pods/exec, pods/attach), as the product uses them
    smoke_pod "$attach" 'import sys; print(sys.stdin.read().upper(), flush=True)' true "$rc"
    kc -n "$namespace" wait "pod/$attach" --for=condition=Ready --timeout="${wait_seconds}s" >/dev/null ||
        smoke_fail "$attach" "gave up after ${wait_seconds}s waiting for pod $attach to be Ready"
    out=$(kc_stream -n "$namespace" exec "$attach" -c run -- python3 -c 'print(6*7)') ||
        smoke_fail "$attach" "kubectl exec failed"
    [[ $out == 42 ]] || smoke_fail "$attach" "kubectl exec printed '$out', not 42"
    say "smoke check: kubectl exec $under printed $out"
    out=$(printf 'attached\n' | kc_stream -n "$namespace" attach -i -q "$attach" -c run) ||
        smoke_fail "$attach" "kubectl attach failed"
    [[ $out == ATTACHED* ]] || smoke_fail "$attach" "kubectl attach printed '$out', not ATTACHED"
    wait_terminated "$attach"
    say "smoke check: kubectl attach $under sent stdin and got back $out"
}

smoke_check() {
    local t0=$SECONDS
    delete_smoke_pods
    smoke_round runc null
    smoke_round gVisor gvisor
    delete_smoke_pods
    say "smoke check passed in $(elapsed $((SECONDS - t0)))"
}

# running: dies unless a cluster runs and is healthy.
running() {
    [[ -e $k8s_root/inputs ]] || die "no cluster in $k8s_root: start one with .ci/ensure-kubernetes.sh"
    healthy || die "the cluster in $k8s_root is not healthy: $REPLY"
}

check() {
    running
    smoke_check
}

import_only() {
    running
    import_images
}

# ------------------------------------------------------------------- stop

stop() {
    if [[ ! -e $k8s_root ]]; then
        say "no cluster in $k8s_root: nothing to stop"
        return 0
    fi
    [[ -e $k8s_root/host/saved ]] || die "$k8s_root was not made by this script (no host/saved): remove it by hand"
    local i m n d
    say "stopping the cluster in $k8s_root"
    # kubelet first (nothing restarts a pod then), containerd last (below).
    stop_components kubelet
    stop_components kube-scheduler kube-controller-manager kube-apiserver etcd
    # Through CRI: each pod's network (CNI DEL), namespaces and mounts go as
    # kubelet would remove them.
    if alive containerd && [[ -x $k8s_root/bin/crireset ]]; then
        timeout "$wait_seconds" "$k8s_root/bin/crireset" -timeout "${wait_seconds}s" "$socket" ||
            say "crireset failed; removing what is left by hand"
    fi
    stop_components containerd
    # Whatever is left: pod processes (by cgroup), then containerd's shims.
    for i in $(pod_processes) $(our_shims); do
        say "killing leftover $(describe_pid "$i")"
        kill -KILL "$i" 2>/dev/null || true
    done
    # Mounts: the state folder's (kubelet's root, overlays, tmpfs volumes) and
    # the pods' network namespaces.
    for m in $(mounts_under "$k8s_root") $(for n in $(our_netns); do mounts_under "$n"; done); do
        umount "$m" 2>/dev/null || umount -l "$m" || say "cannot unmount $m"
    done
    for n in $(our_netns); do rm -f "$n"; done
    # cgroups, deepest first (rmdir fails while a process is still inside)
    for d in $(kubepods_cgroups); do
        for i in 1 2 3 4 5; do
            find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
            [[ -d $d ]] || break
            sleep 0.2
        done
    done
    if ip link show "$bridge" >/dev/null 2>&1; then
        ip link delete "$bridge" || say "cannot delete the link $bridge"
    fi
    remove_kube_chains
    restore_sysctls
    for d in "${own_host_paths[@]}"; do
        [[ -e $d ]] || continue
        grep -qxF "$d" "$k8s_root/host/paths" && continue
        if [[ -z "$(mounts_under "$d")" ]]; then
            rm -rf --one-file-system "$d"
        else
            say "$d has mounts: left alone"
        fi
    done
    for d in "${shared_host_paths[@]}"; do
        if [[ -d $d ]] && ! grep -qxF "$d" "$k8s_root/host/paths"; then
            rmdir "$d" 2>/dev/null || true
        fi
    done
    local left
    left=$(leftovers)
    if [[ -n $left ]]; then
        printf '%s\n' "$left" >&2
        die "stop left the above behind; $k8s_root is kept"
    fi
    rm -rf --one-file-system "$k8s_root"
    say "stopped; host settings restored"
}

# Puts back the sysctls saved at start.
restore_sysctls() {
    local n v
    while IFS='=' read -r n v; do
        [[ "$(sysctl -n "$n" 2>/dev/null)" == "$v" ]] && continue
        if sysctl -q -w "$n=$v"; then say "restored $n = $v"; else say "cannot restore $n = $v"; fi
    done <"$k8s_root/host/sysctl"
}

# new_kube_chains: "iptables TABLE CHAIN" for each KUBE-* chain (of iptables
# and ip6tables) that was not there at start.
new_kube_chains() {
    local cmd t chain
    for cmd in iptables ip6tables; do
        command -v "$cmd" >/dev/null || continue
        for t in filter nat mangle; do
            for chain in $("$cmd" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
                grep -qxF "$cmd $t $chain" "$k8s_root/host/chains" || printf '%s %s %s\n' "$cmd" "$t" "$chain"
            done
        done
    done
}
# Removes the chains kubelet made (KUBE-FIREWALL, KUBE-KUBELET-CANARY,
# KUBE-IPTABLES-HINT) and the rules that jump to them (INPUT and OUTPUT to
# KUBE-FIREWALL).
remove_kube_chains() {
    local cmd t chain parent num
    while read -r cmd t chain; do
        for parent in $("$cmd" -t "$t" -S | awk '$1 == "-P" || $1 == "-N" {print $2}'); do
            for num in $("$cmd" -t "$t" -L "$parent" -n --line-numbers |
                awk -v c="$chain" 'NR > 2 && $2 == c {print $1}' | sort -rn); do
                "$cmd" -t "$t" -D "$parent" "$num" || say "cannot remove rule $num of $cmd -t $t $parent"
            done
        done
        if ! "$cmd" -t "$t" -F "$chain" || ! "$cmd" -t "$t" -X "$chain"; then
            say "cannot remove $cmd -t $t chain $chain"
        fi
    done < <(new_kube_chains)
}

# What stop must not leave behind (printed, one line each).
leftovers() {
    local c n m d
    for c in "${components[@]}"; do
        alive "$c" && echo "process: $c (pid $REPLY)"
    done
    for n in $(pod_processes) $(our_shims); do echo "process: $(describe_pid "$n")"; done
    for m in $(mounts_under "$k8s_root"); do echo "mount: $m"; done
    for n in $(our_netns); do echo "network namespace: $n"; done
    for d in $(kubepods_cgroups); do echo "cgroup: $d"; done
    ip link show "$bridge" >/dev/null 2>&1 && echo "link: $bridge"
    new_kube_chains | sed 's/^/iptables chain: /'
    while IFS='=' read -r n m; do
        [[ "$(sysctl -n "$n" 2>/dev/null)" == "$m" ]] || echo "sysctl: $n is $(sysctl -n "$n"), was $m"
    done <"$k8s_root/host/sysctl"
    for d in "${own_host_paths[@]}"; do
        [[ -e $d ]] && ! grep -qxF "$d" "$k8s_root/host/paths" && echo "path: $d"
    done
    return 0
}

# ------------------------------------------------------------------- main

cmd=${1:-start}
case $cmd in
-h | --help | help)
    usage
    exit 0
    ;;
start | check | stop) ;;
import) cmd=import_only ;;
*)
    die "unknown command '$cmd': use start, check, stop or import (--help says more)"
    ;;
esac
need_root
mkdir -p "$cache"
exec 9>"$cache/lock"
flock -w "$step_seconds" 9 || die "another ensure-kubernetes.sh held $cache/lock for ${step_seconds}s"
"$cmd"
