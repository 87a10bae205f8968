#!/usr/bin/env bash
# Builds, once per machine, the control plane the Kubernetes engine's
# cluster tier runs against (docs/kubernetes.md, "Testing"), and prints the
# directory that holds it. With the argument "real" it also builds what the
# opt-in real-Pod tier (RTSANDBOX_K8S_REAL=1) adds: a kubelet, the pause
# binary and the CNI plugins.
#
#   bin/kube-apiserver, kube-controller-manager, kube-scheduler  tools/k8scluster (v1.31.14)
#   bin/kwok                                                     tools/kwok (v0.8.0)
#   bin/agent-sandbox-controller                                 tools/agentsandbox (v1.0.1)
#   bin/etcd                                                     Debian's etcd-server
#   real: bin/kubelet (tools/k8scluster), bin/pause (the kubernetes module's pause.c,
#         static), cni/ (Debian's containernetworking-plugins)
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
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${RTSANDBOX_K8S_TOOLS:-/var/cache/rtsandbox/k8s}"
key="$(cd "$root" && cat scripts/k8s-tools.sh tools/*/go.mod tools/*/go.sum | sha256sum | cut -c1-16)"
out="$cache/$key"
real="${1:-}"
build_real() { # dir: the kubelet, pause and the CNI plugins into it
  local dir="$1"
  (cd "$root/tools/k8scluster" && nice -n 10 go build -trimpath -ldflags "-X k8s.io/component-base/version.gitVersion=v1.31.14 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=31" -o "$dir/bin/" k8s.io/kubernetes/cmd/kubelet) >&2
  local kdir
  kdir="$(cd "$root/tools/k8scluster" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  gcc -Os -static -o "$dir/bin/pause" "$kdir/build/pause/linux/pause.c" >&2
  (
    cd "$dir"
    if ! apt-get download containernetworking-plugins >&2 2>/dev/null; then
      apt-get update -q >&2
      apt-get download containernetworking-plugins >&2
    fi
    dpkg -x containernetworking-plugins_*.deb cni-pkg
    mkdir -p cni
    cp cni-pkg/usr/lib/cni/* cni/
    rm -rf cni-pkg containernetworking-plugins_*.deb
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
  (cd "$root/tools/$dir" && nice -n 10 go build -trimpath -ldflags "${LDFLAGS:-}" -o "$tmp/bin/" "$@")
}
LDFLAGS="-X k8s.io/component-base/version.gitVersion=v1.31.14 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=31" \
  build k8scluster k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler >&2
build kwok sigs.k8s.io/kwok/cmd/kwok >&2
build agentsandbox sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller >&2

kwokdir="$(cd "$root/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for d in node/fast node/heartbeat pod/fast pod/chaos/pod-container-running-failed; do
  for f in "$kwokdir/kustomize/stage/$d"*.yaml "$kwokdir/kustomize/stage/$d"/*.yaml; do
    [ -f "$f" ] && [ "$(basename "$f")" != kustomization.yaml ] || continue
    cat "$f"
    echo "---"
  done
done >"$tmp/kwok-stages.yaml"
sandboxdir="$(cd "$root/tools/agentsandbox" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)"
cp "$sandboxdir"/k8s/crds/*.yaml "$tmp/crds/"

# etcd: Debian's server package, unpacked (never installed: it would start
# a system service).
(
  cd "$tmp"
  if ! apt-get download etcd-server >&2 2>/dev/null; then
    apt-get update -q >&2
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
