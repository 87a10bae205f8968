#!/usr/bin/env bash
# Builds, once per machine, the control plane the Kubernetes engine's
# cluster tier runs against (docs/kubernetes.md, "Testing"), and prints the
# directory that holds it. With the argument "real" it also builds what the
# opt-in real-Pod tier (RTSANDBOX_K8S_REAL=1) adds: a kubelet, the pause
# binary, the CNI plugins, gVisor, kube-proxy and a network policy
# enforcer.
#
#   bin/kube-apiserver, kube-scheduler   tools/k8scluster (v1.31.14)
#   bin/garbage-collector                tools/k8scluster/cmd/garbage-collector: Kubernetes'
#                                        garbage collector (v1.31.14) without the rest of
#                                        kube-controller-manager
#   bin/kwok                             tools/k8scontrollers (kwok v0.8.0)
#   bin/agent-sandbox-controller         tools/k8scontrollers (agent-sandbox v1.0.1)
#   bin/etcd                                                     Debian's etcd-server
#   real: bin/kubelet and bin/kube-proxy (tools/k8scluster), bin/pause (the kubernetes module's pause.c,
#         static), cni/ (Debian's containernetworking-plugins),
#         bin/runsc and bin/containerd-shim-runsc-v1 (tools/gvisor: gVisor of
#         2024-09-16, whose shim still speaks Debian containerd 1.6's
#         handshake, with tools/gvisor/shim-oom-score.patch applied to a copy,
#         built by Go 1.23: gVisor reads the runtime's internals at offsets
#         of its day, and a sentry built by a newer Go panics),
#         bin/kube-router (tools/kuberouter: kube-router v2.1.0, its network
#         policy controller alone enforces the NetworkPolicies of the tier's
#         Pods) and bin/ipset with lib/libipset.so.13 (Debian's ipset and
#         libipset13, unpacked: kube-router runs ipset with lib/ on
#         LD_LIBRARY_PATH)
#   kwok-stages.yaml   kwok's stages: nodes ready at once, Pods running at
#                      once, and failed on the label
#                      pod-container-running-failed.stage.kwok.x-k8s.io=true
#   crds/              agent-sandbox's CRDs
#
# Each tool is built from its committed tools module, whose go.mod and
# go.sum pin every version (the Go module proxy serves them). The result is
# cached under $RTSANDBOX_K8S_TOOLS (default /var/cache/rtsandbox/k8s), in
# a directory named by a digest of those modules and this script: a change
# to either builds anew, an unchanged tree costs nothing. A cold build takes
# about 15 minutes on 2 cores (the kube-apiserver), niced so that it does
# not starve tests running beside it.
#
# What keeps the cold build short (it is most of CI's time on a new
# machine): kwok and the agent-sandbox controller share one module, so one
# set of versions and one compile of the client libraries they share; they
# build with the flags of the test command's non-race builds (CGO off,
# -trimpath: internal/hostbin's package doc), and that module pins every
# module it shares with the main module at the main module's version
# (scripts/k8stools_test.go), so what it compiles is reused by the main
# module's vet, staticcheck, fuzz and test builds; -s -w, since linking the DWARF of
# binaries this size costs minutes and nothing here debugs them; and the
# garbage collector alone instead of kube-controller-manager.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${RTSANDBOX_K8S_TOOLS:-/var/cache/rtsandbox/k8s}"
key="$(cd "$root" && cat scripts/k8s-tools.sh tools/*/go.mod tools/*/go.sum tools/*/*.patch tools/k8scluster/cmd/*/*.go | sha256sum | cut -c1-16)"
out="$cache/$key"
real="${1:-}"
K8S_VERSION="-X k8s.io/component-base/version.gitVersion=v1.31.14 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=31"
build_gvisor() { # dir: runsc and its containerd shim into dir/bin
  local dir="$1" src work
  # gVisor knows the Go runtime's internals of its own day: Go 1.23 (the
  # module proxy serves the toolchain), whatever Go runs this script.
  local -x GOTOOLCHAIN=go1.23.12
  src="$(cd "$root/tools/gvisor" && go mod download gvisor.dev/gvisor && go list -m -f '{{.Dir}}' gvisor.dev/gvisor)"
  work="$(mktemp -d)"
  cp -r "$src" "$work/gvisor"
  chmod -R u+w "$work/gvisor"
  patch -s -d "$work/gvisor" -p1 <"$root/tools/gvisor/shim-oom-score.patch"
  cp "$root/tools/gvisor/go.mod" "$root/tools/gvisor/go.sum" "$work/"
  go mod edit -replace "gvisor.dev/gvisor=$work/gvisor" "$work/go.mod"
  # runsc must be static: it re-executes itself in an empty root.
  (cd "$root/tools/gvisor" && CGO_ENABLED=0 nice -n 10 go build -modfile "$work/go.mod" -ldflags "-s -w" -o "$work/" gvisor.dev/gvisor/runsc gvisor.dev/gvisor/shim) >&2
  mv "$work/runsc" "$dir/bin/runsc"
  mv "$work/shim" "$dir/bin/containerd-shim-runsc-v1"
  rm -rf "$work"
}
build_real() { # dir: the kubelet, pause, the CNI plugins and gVisor into it
  local dir="$1"
  # The go command's default flags (cgo on), as the tier has always run
  # the kubelet; the base tools' CGO off and -trimpath are for sharing
  # compiles with the test command, which never builds these.
  (cd "$root/tools/k8scluster" && nice -n 10 go build -ldflags "-s -w $K8S_VERSION" -o "$dir/bin/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy) >&2
  build_gvisor "$dir"
  (cd "$root/tools/kuberouter" && nice -n 10 go build -ldflags "-s -w" -o "$dir/bin/" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) >&2
  local kdir
  kdir="$(cd "$root/tools/k8scluster" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  gcc -Os -static -o "$dir/bin/pause" "$kdir/build/pause/linux/pause.c" >&2
  (
    cd "$dir"
    if ! apt-get download containernetworking-plugins >&2 2>/dev/null; then
      apt-get -o DPkg::Lock::Timeout=600 update -q >&2
      apt-get download containernetworking-plugins >&2
    fi
    dpkg -x containernetworking-plugins_*.deb cni-pkg
    mkdir -p cni
    cp cni-pkg/usr/lib/cni/* cni/
    rm -rf cni-pkg containernetworking-plugins_*.deb
    apt-get download ipset libipset13 >&2
    dpkg -x ipset_*.deb ipset-pkg
    dpkg -x libipset13_*.deb ipset-pkg
    mkdir -p lib
    cp ipset-pkg/usr/sbin/ipset bin/ipset
    cp -P ipset-pkg/usr/lib/*/libipset.so.13* lib/
    rm -rf ipset-pkg ipset_*.deb libipset13_*.deb
  )
  touch "$dir/.done-real"
}
if [ -f "$out/.done" ]; then
  if [ "$real" = real ] && [ ! -f "$out/.done-real" ]; then
    build_real "$out"
  fi
  echo "$out"
  exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/crds"

build() { # module dir, then packages
  local dir="$1"
  shift
  (cd "$root/tools/$dir" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w ${LDFLAGS:-}" -o "$tmp/bin/" "$@")
}
LDFLAGS="$K8S_VERSION" build k8scluster k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler ./cmd/garbage-collector >&2
build k8scontrollers sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller >&2

kwokdir="$(cd "$root/tools/k8scontrollers" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for d in node/fast node/heartbeat pod/fast pod/chaos/pod-container-running-failed; do
  for f in "$kwokdir/kustomize/stage/$d"*.yaml "$kwokdir/kustomize/stage/$d"/*.yaml; do
    [ -f "$f" ] && [ "$(basename "$f")" != kustomization.yaml ] || continue
    cat "$f"
    echo "---"
  done
done >"$tmp/kwok-stages.yaml"
sandboxdir="$(cd "$root/tools/k8scontrollers" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)"
cp "$sandboxdir"/k8s/crds/*.yaml "$tmp/crds/"

# etcd: Debian's server package, unpacked (never installed: it would start
# a system service).
(
  cd "$tmp"
  if ! apt-get download etcd-server >&2 2>/dev/null; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    apt-get download etcd-server >&2
  fi
  dpkg -x etcd-server_*.deb etcd-pkg
  cp etcd-pkg/usr/bin/etcd bin/etcd
  rm -rf etcd-pkg etcd-server_*.deb
)
if [ "$real" = real ]; then
  build_real "$tmp"
fi
chmod -R a+rX "$tmp"
touch "$tmp/.done"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
# Earlier builds (another key) are dead weight: half a gigabyte each.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build-*' -exec rm -rf {} +
echo "$out"
