#!/usr/bin/env bash
# Builds the test control plane from Go modules into ${RAYKUEUE_BIN_DIR}
# (default ~/.cache/raykueue/bin, always outside the repo), and copies the CRDs
# and kwok stages it needs from the module cache beside it:
#
#   $RAYKUEUE_BIN_DIR/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,
#                      kubectl,kueue,ray-operator,kwok}
#   $RAYKUEUE_BIN_DIR/../crds/{kueue,kuberay}/*.yaml
#   $RAYKUEUE_BIN_DIR/../kwok-stages/{node-fast,node-heartbeat,pod-fast}/*.yaml
#
# Two Go modules: this folder (etcd, Kubernetes, Kueue, kwok: one module so the
# shared k8s.io code compiles once) and kuberay/ (the KubeRay operator, which does
# not compile against the controller-runtime Kueue needs; see kuberay/go.mod).
#
# A third, tools/ (promtool and helm for the `tools` test tier), has its own
# script, run last (see tools/build.sh).
#
# A stamp (sha256 of both go.mod/go.sum, versions.env and this script) makes a
# warm run a no-op. Only missing binaries are built when the stamp matches; everything
# is (re)linked when it does not (Go's build cache keeps that cheap).
#
# Other versions of Kueue or KubeRay (the README's range; scripts/versions runs the
# e2e scenarios on each): RAYKUEUE_KUEUE_VERSION=vX.Y.Z builds the Kueue manager
# from the module versions/kueue-vX.Y.Z/, RAYKUEUE_KUBERAY_VERSION=vX.Y.Z the
# operator from versions/kuberay-vX.Y.Z/, each on the dependencies that release was
# made with; the CRDs come from the same modules. Either one sets the default bin
# dir to ~/.cache/raykueue/versions/kueue-<v>_kuberay-<v>/bin, so the default
# stack's binaries are never replaced; the tools (promtool, helm) are not built there.
#
# Environment: RAYKUEUE_BIN_DIR, RAYKUEUE_BUILD_JOBS (go build -p, default: nproc,
# at most 2 on small machines), RAYKUEUE_FORCE_BUILD=1 to ignore the stamp,
# RAYKUEUE_KUEUE_VERSION, RAYKUEUE_KUBERAY_VERSION.
set -euo pipefail
start_s=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
# shellcheck source=versions.env
source ./versions.env

# Module folder of each selectable component: the pinned version's, or versions/<name>-<v>.
kueue_mod=.
kuberay_mod=kuberay
selected=""
if [[ -n "${RAYKUEUE_KUEUE_VERSION:-}" && "${RAYKUEUE_KUEUE_VERSION}" != "$KUEUE_VERSION" ]]; then
  kueue_mod="versions/kueue-${RAYKUEUE_KUEUE_VERSION}"; KUEUE_VERSION="$RAYKUEUE_KUEUE_VERSION"; selected=1
fi
if [[ -n "${RAYKUEUE_KUBERAY_VERSION:-}" && "${RAYKUEUE_KUBERAY_VERSION}" != "$KUBERAY_VERSION" ]]; then
  kuberay_mod="versions/kuberay-${RAYKUEUE_KUBERAY_VERSION}"; KUBERAY_VERSION="$RAYKUEUE_KUBERAY_VERSION"; selected=1
fi
for m in "$kueue_mod" "$kuberay_mod"; do
  [[ -f "$m/go.mod" ]] || { echo "build.sh: no module $here/$m for that version; have: $(cd versions && ls -d -- */ | tr -d / | tr '\n' ' ')" >&2; exit 2; }
done
default_bin="$HOME/.cache/raykueue/bin"
[[ -n "$selected" ]] && default_bin="$HOME/.cache/raykueue/versions/kueue-${KUEUE_VERSION}_kuberay-${KUBERAY_VERSION}/bin"
bin_dir="${RAYKUEUE_BIN_DIR:-$default_bin}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
share_dir="$(dirname "$bin_dir")"
crd_dir="$share_dir/crds"
stage_dir="$share_dir/kwok-stages"
# Named after what it covers: tools/ keeps its own (.stamp-tools), so changing the
# tools never relinks the control plane.
stamp_file="$bin_dir/.stamp-controlplane"

repo_root="$(cd "$here/.." && pwd)"
case "$bin_dir/" in
  "$repo_root"/*) echo "build.sh: RAYKUEUE_BIN_DIR ($bin_dir) must be outside the repo" >&2; exit 2 ;;
esac

# binary name -> main package; mods: binary name -> module folder (default: .)
declare -A mods=([kueue]="$kueue_mod" [ray-operator]="$kuberay_mod")
declare -A pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kueue]=sigs.k8s.io/kueue/cmd/kueue
  [ray-operator]=github.com/ray-project/kuberay/ray-operator
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
)
order=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kueue ray-operator kwok)

stamp="$( (cat go.mod go.sum kuberay/go.mod kuberay/go.sum versions.env build.sh "$kueue_mod/go.mod" \
  "$kueue_mod/go.sum" "$kuberay_mod/go.mod" "$kuberay_mod/go.sum"; echo "$KUEUE_VERSION $KUBERAY_VERSION") \
  | sha256sum | cut -d' ' -f1)"
old_stamp="$(cat "$stamp_file" 2>/dev/null || true)"

elapsed() { echo $(( $(date +%s) - start_s )); }

all_present() {
  local b
  for b in "${order[@]}"; do [[ -x "$bin_dir/$b" ]] || return 1; done
  [[ -f "$crd_dir/kueue/kueue.x-k8s.io_workloads.yaml" && -f "$crd_dir/kuberay/ray.io_rayclusters.yaml" \
     && -d "$stage_dir/pod-fast" ]] || return 1
}

if [[ "${RAYKUEUE_FORCE_BUILD:-0}" != 1 && "$stamp" == "$old_stamp" ]] && all_present; then
  echo "build.sh: control plane up to date in $bin_dir ($(elapsed)s)"
  [[ -n "$selected" ]] && exit 0
  RAYKUEUE_BIN_DIR="$bin_dir" exec bash tools/build.sh
fi

command -v go >/dev/null || { echo "build.sh: go is not on PATH (needs Go >= 1.26)" >&2; exit 1; }
./gen-replaces.sh --check

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

# What to build: everything when the inputs changed, else only what is missing.
todo=()
for b in "${order[@]}"; do
  if [[ "$stamp" != "$old_stamp" || "${RAYKUEUE_FORCE_BUILD:-0}" == 1 || ! -x "$bin_dir/$b" ]]; then
    todo+=("$b")
  fi
done

# etcd, Kubernetes and kwok do not depend on the selected versions: a bin dir of other
# versions takes them from the pinned bin dir when that was built from these same inputs
# (its .stamp-base), instead of relinking about 1 GB of binaries (minutes on 2 busy cores).
base=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
base_stamp="$(cat go.mod go.sum versions.env build.sh | sha256sum | cut -d' ' -f1)"
pinned_bin="$HOME/.cache/raykueue/bin"
if [[ -n "$selected" && "$pinned_bin" != "$bin_dir" \
      && "$(cat "$pinned_bin/.stamp-base" 2>/dev/null || true)" == "$base_stamp" ]]; then
  rest=()
  for b in "${todo[@]}"; do
    if [[ " ${base[*]} " == *" $b "* && -x "$pinned_bin/$b" ]]; then
      cp -f "$pinned_bin/$b" "$bin_dir/$b.tmp" && mv -f "$bin_dir/$b.tmp" "$bin_dir/$b"
      echo "build.sh: $b copied from $pinned_bin (same inputs)"
    else
      rest+=("$b")
    fi
  done
  todo=("${rest[@]}")
fi

jobs="${RAYKUEUE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"

k8s_minor="${KUBERNETES_VERSION#v1.}"; k8s_minor="${k8s_minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=${KUBERNETES_VERSION} -X $p.gitMajor=1 -X $p.gitMinor=${k8s_minor}"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=${build_date}"
done
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=${build_date}"

if (( ${#todo[@]} )); then
  echo "build.sh: building ${todo[*]} into $bin_dir (go build -p $jobs; a cold build takes a while)"
  out="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  trap 'rm -rf "$out"' EXIT
  # Each module folder once, in order.
  for mod in $(printf '%s\n' . "$kueue_mod" "$kuberay_mod" | awk '!seen[$0]++'); do
    list=()
    for b in "${todo[@]}"; do
      [[ "${mods[$b]:-.}" == "$mod" ]] && list+=("${pkgs[$b]}")
    done
    (( ${#list[@]} )) || continue
    echo "build.sh: [$mod] go build ${list[*]}"
    (cd "$mod" && go mod download && go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$out/" "${list[@]}")
  done
  # `go build -o DIR` names a binary after its package path; etcd's ends in
  # server/v3, so it comes out as "server".
  if [[ -f "$out/server" ]]; then mv "$out/server" "$out/etcd"; fi
  for b in "${todo[@]}"; do
    [[ -x "$out/$b" ]] || { echo "build.sh: $b was not produced (have: $(ls "$out"))" >&2; exit 1; }
    mv -f "$out/$b" "$bin_dir/$b"
  done
fi

# CRDs and kwok stages, straight from the module cache.
moddir() {  # [module folder] module path -> its directory in the module cache (after replace)
  local in="."; if (( $# == 2 )); then in="$1"; shift; fi
  (cd "$in" && go list -m -f '{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}' "$1")
}
copy_yaml() {  # src dir, dst dir: top-level *.yaml except kustomization.yaml
  local src="$1" dst="$2" f
  rm -rf "$dst"; mkdir -p "$dst"
  for f in "$src"/*.yaml; do
    [[ "$(basename "$f")" == kustomization.yaml ]] && continue
    install -m 0644 "$f" "$dst/"
  done
}
kueue_dir="$(moddir "$kueue_mod" sigs.k8s.io/kueue)"
kuberay_dir="$(moddir "$kuberay_mod" github.com/ray-project/kuberay/ray-operator)"
kwok_dir="$(moddir sigs.k8s.io/kwok)"
copy_yaml "$kueue_dir/config/components/crd/bases" "$crd_dir/kueue"
copy_yaml "$kuberay_dir/config/crd/bases" "$crd_dir/kuberay"
copy_yaml "$kwok_dir/kustomize/stage/node/fast" "$stage_dir/node-fast"
copy_yaml "$kwok_dir/kustomize/stage/node/heartbeat" "$stage_dir/node-heartbeat"
copy_yaml "$kwok_dir/kustomize/stage/pod/fast" "$stage_dir/pod-fast"

# What this bin dir runs (devstack reads KUEUE_VERSION to find Kueue's shipped files).
grep -v '^#' versions.env | sed -e "s/^KUEUE_VERSION=.*/KUEUE_VERSION=$KUEUE_VERSION/" \
  -e "s/^KUBERAY_VERSION=.*/KUBERAY_VERSION=$KUBERAY_VERSION/" > "$share_dir/versions.env"

all_present || { echo "build.sh: something is still missing in $share_dir" >&2; exit 1; }
echo "$stamp" > "$stamp_file"
[[ -z "$selected" ]] && echo "$base_stamp" > "$bin_dir/.stamp-base"
echo "build.sh: control plane ready in $bin_dir ($(elapsed)s)"
[[ -n "$selected" ]] && exit 0
RAYKUEUE_BIN_DIR="$bin_dir" bash tools/build.sh
