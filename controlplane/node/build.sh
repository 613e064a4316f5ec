#!/usr/bin/env bash
# Builds the real node of the `node` test tier from Go modules into
# ${RAYKUEUE_BIN_DIR} (default ~/.cache/raykueue/bin, always outside the repo):
#
#   kubelet, kube-proxy     k8s.io/kubernetes, the release ../go.mod pins (this module)
#   containerd, containerd-shim-runc-v2, ctr
#                           github.com/containerd/containerd/v2 (containerd/, its own
#                           module: it needs a newer CRI API than the 1.36 replaces allow)
#   pause                   Kubernetes' pause.c, and the sandbox image made of it (pause.sh)
#
# Only the node tier needs them (docs/DEVSTACK.md, "The real node"), so this is
# its own module and its own script: the api and e2e tiers never build them.
# runc and the CNI plugins come from Debian (apt: runc, containernetworking-plugins);
# see ensure_debian_packages below.
#
# A stamp (sha256 of go.mod, go.sum, ../versions.env and this script) makes a warm
# run a no-op, as in ../build.sh. CGO is off: the kubelet and kube-proxy are static
# in Kubernetes' own releases too; containerd loses only the btrfs, devmapper and
# zfs snapshotters (build tags), which the node does not use (overlayfs).
#
# Environment: RAYKUEUE_BIN_DIR, RAYKUEUE_BUILD_JOBS, RAYKUEUE_FORCE_BUILD=1.
set -euo pipefail
start_s=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
# shellcheck source=../versions.env
source ../versions.env

bin_dir="${RAYKUEUE_BIN_DIR:-$HOME/.cache/raykueue/bin}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
stamp_file="$bin_dir/.stamp-node"
repo_root="$(cd "$here/../.." && pwd)"
case "$bin_dir/" in
  "$repo_root"/*) echo "node/build.sh: RAYKUEUE_BIN_DIR ($bin_dir) must be outside the repo" >&2; exit 2 ;;
esac

declare -A pkgs=(
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [containerd]=github.com/containerd/containerd/v2/cmd/containerd
  [containerd-shim-runc-v2]=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  [ctr]=github.com/containerd/containerd/v2/cmd/ctr
)
order=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr)
elapsed() { echo $(( $(date +%s) - start_s )); }

# runc (the OCI runtime containerd's shim calls), the CNI plugins (bridge,
# host-local, loopback, portmap) and iptables (kube-proxy) are Debian's: runc
# needs cgo and C code (nsexec) to build, and Debian's are recent enough.
ensure_debian_packages() {
  local missing=()
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  (( ${#missing[@]} )) || return 0
  command -v apt-get >/dev/null || { echo "node/build.sh: needs ${missing[*]} (Debian packages)" >&2; exit 1; }
  echo "node/build.sh: apt-get install ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
ensure_debian_packages

declare -A mods=([containerd]=containerd [containerd-shim-runc-v2]=containerd [ctr]=containerd)
stamp="$(cat go.mod go.sum containerd/go.mod containerd/go.sum ../versions.env build.sh pause.sh \
  | sha256sum | cut -d' ' -f1)"
old_stamp="$(cat "$stamp_file" 2>/dev/null || true)"
todo=()
for b in "${order[@]}"; do
  if [[ "$stamp" != "$old_stamp" || "${RAYKUEUE_FORCE_BUILD:-0}" == 1 || ! -x "$bin_dir/$b" ]]; then
    todo+=("$b")
  fi
done
if (( ! ${#todo[@]} )); then
  bash pause.sh
  echo "node/build.sh: node binaries up to date in $bin_dir ($(elapsed)s)"
  exit 0
fi

command -v go >/dev/null || { echo "node/build.sh: go is not on PATH (needs Go >= 1.26)" >&2; exit 1; }
# The kubelet must be the release the control plane runs: same version, same
# staging replaces (../gen-replaces.sh writes those of ../go.mod; copy them here).
if [[ "$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" != "$KUBERNETES_VERSION" ]] \
   || ! diff <(grep '^replace k8s.io/' ../go.mod) <(grep '^replace k8s.io/' go.mod) >/dev/null; then
  echo "node/build.sh: go.mod is not at k8s.io/kubernetes $KUBERNETES_VERSION with ../go.mod's" \
       "staging replaces; copy them (grep '^replace k8s.io/' ../go.mod) and go mod tidy" >&2
  exit 1
fi
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"
jobs="${RAYKUEUE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

k8s_minor="${KUBERNETES_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
k8s_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $p.gitVersion=${KUBERNETES_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${k8s_minor}"
  k8s_ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=${build_date}"
done
containerd_version="$(cd containerd && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
ctd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version}"
ctd_tags="no_btrfs no_devmapper no_zfs"

out="$(mktemp -d "$bin_dir/.build-node.XXXXXX")"
trap 'rm -rf "$out"' EXIT
for b in "${todo[@]}"; do
  t=$(date +%s)
  case "$b" in
    kubelet|kube-proxy) go build -p "$jobs" -trimpath -ldflags "$k8s_ldflags" -o "$out/$b" "${pkgs[$b]}" ;;
    *) (cd "${mods[$b]}" && go build -p "$jobs" -trimpath -tags "$ctd_tags" -ldflags "$ctd_ldflags" \
          -o "$out/$b" "${pkgs[$b]}") ;;
  esac
  mv -f "$out/$b" "$bin_dir/$b"
  echo "node/build.sh: $b built in $(( $(date +%s) - t ))s"
done
bash pause.sh
echo "$stamp" > "$stamp_file"
echo "node/build.sh: node binaries ready in $bin_dir ($(elapsed)s)"
