#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-scheduler and kubectl for the real Kubernetes test tier, once.
#
#   tools/kube/build.sh            build (if needed) and print the binaries' directory
#   tools/kube/build.sh --versions print the four components' versions (building first if needed)
#
# The versions are those pinned in tools/kube/go.mod (k8s.io/kubernetes and go.etcd.io/etcd/server/v3);
# the binaries go to .cache/kube/<kubernetes version>/ and are reused while each one reports the pinned
# version. Go's module and build caches are the defaults (go env GOMODCACHE, GOCACHE), so a rebuild after
# a cache directory is removed compiles little.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

pinned() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/go.mod"; }
kube_version="$(pinned k8s.io/kubernetes)"
etcd_version="$(pinned go.etcd.io/etcd/server/v3)"
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
    echo "tools/kube/go.mod does not pin k8s.io/kubernetes and go.etcd.io/etcd/server/v3" >&2
    exit 2
fi
out="${JOINER_KUBE_BIN:-$root/.cache/kube/$kube_version}"

# What each binary prints for --version when it is the pinned build.
expected() {
    case "$1" in
        kube-apiserver | kube-scheduler) echo "Kubernetes $kube_version" ;;
        kubectl) echo "Client Version: $kube_version" ;;
        etcd) echo "etcd Version: ${etcd_version#v}" ;;
    esac
}
reported() {
    case "$1" in
        kubectl) "$out/$1" version --client 2>/dev/null | head -n 1 ;;
        *) "$out/$1" --version 2>/dev/null | head -n 1 ;;
    esac
}
current() { [[ -x "$out/$1" ]] && [[ "$(reported "$1")" == "$(expected "$1")" ]]; }

stale=()
for bin in etcd kube-apiserver kube-scheduler kubectl; do
    current "$bin" || stale+=("$bin")
done

if ((${#stale[@]})); then
    if ! command -v go >/dev/null 2>&1; then
        echo "The real Kubernetes tier needs Go >= 1.26 (https://go.dev/doc/install) to build ${stale[*]} into $out" >&2
        exit 3
    fi
    packages=()
    for bin in "${stale[@]}"; do
        case "$bin" in
            etcd) packages+=(go.etcd.io/etcd/server/v3) ;;
            *) packages+=("k8s.io/kubernetes/cmd/$bin") ;;
        esac
    done
    minor="${kube_version#v1.}"
    minor="${minor%%.*}"
    # What the Kubernetes release build stamps in (component-base/version): --version and /version report it.
    pkg=k8s.io/component-base/version
    ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    mkdir -p "$out.tmp"
    echo "==> building ${stale[*]} (Kubernetes $kube_version, etcd $etcd_version) into $out" >&2
    echo "    a first build compiles about 2,100 packages: 10-20 minutes on 2 cores; with Go's build cache warm, seconds" >&2
    start=$SECONDS
    # -v prints each package as it is compiled: the progress of a long first build.
    (cd "$here" && go build -v -trimpath -tags providerless -ldflags "$ldflags" -o "$out.tmp/" "${packages[@]}") 2>&1 \
        | awk '{ n++; if (n % 100 == 0) { printf "    %d packages compiled, %s\n", n, $0; fflush() } } /^#|^go: |:[0-9]+:/ { print; fflush() }' >&2
    status=${PIPESTATUS[0]}
    if ((status)); then
        echo "go build failed (status $status)" >&2
        exit "$status"
    fi
    # go build names the etcd server module's main package after its path (server/v3 -> server).
    if [[ -e "$out.tmp/server" ]]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
    for bin in "${stale[@]}"; do
        mkdir -p "$out"
        mv "$out.tmp/$bin" "$out/$bin"
    done
    rmdir "$out.tmp" 2>/dev/null || true
    echo "==> built in $((SECONDS - start)) s" >&2
    for bin in "${stale[@]}"; do
        if ! current "$bin"; then
            echo "$out/$bin reports '$(reported "$bin")', expected '$(expected "$bin")'" >&2
            exit 4
        fi
    done
fi

if [[ "${1:-}" == "--versions" ]]; then
    for bin in etcd kube-apiserver kube-scheduler kubectl; do
        printf '%-15s %s\n' "$bin" "$(reported "$bin")"
    done
else
    echo "$out"
fi
