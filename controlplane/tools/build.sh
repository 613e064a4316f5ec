#!/usr/bin/env bash
# Builds the operator tools the `tools` test tier runs, from this Go module, into
# ${RAYKUEUE_BIN_DIR} (default ~/.cache/raykueue/bin, outside the repo), and copies
# the CRDs the chart's server-side dry run needs beside it:
#
#   $RAYKUEUE_BIN_DIR/{promtool,helm}
#   $RAYKUEUE_BIN_DIR/../crds/prometheus-operator/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml
#   $RAYKUEUE_BIN_DIR/../crds/cert-manager/cert-manager.io_{certificates,issuers}.yaml
#
# ../build.sh runs it after the control plane, with RAYKUEUE_BIN_DIR resolved and
# checked to be outside the repo. A stamp of its own (this script, go.mod, go.sum,
# versions.env) makes a warm run a no-op, and a change here never relinks the
# control plane. promtool is built with Prometheus' remove_all_sd tag: rule
# checks and rule unit tests need no service discovery, and it halves the build.
# Environment (from ../build.sh): RAYKUEUE_BIN_DIR, RAYKUEUE_BUILD_JOBS, RAYKUEUE_FORCE_BUILD=1.
set -euo pipefail
start_s=$(date +%s)
cd "$(dirname "${BASH_SOURCE[0]}")"
# shellcheck source=versions.env
source ./versions.env

bin_dir="${RAYKUEUE_BIN_DIR:?run controlplane/build.sh, which sets RAYKUEUE_BIN_DIR}"
crd_dir="$(dirname "$bin_dir")/crds"
stamp_file="$bin_dir/.stamp-tools"

# CRD source: module path, version, pinned sum, folder in the module, files, destination
crd_sources=(
  "github.com/prometheus-operator/prometheus-operator|$PROMETHEUS_OPERATOR_VERSION|$PROMETHEUS_OPERATOR_SUM|example/prometheus-operator-crd|monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml|prometheus-operator"
  "github.com/cert-manager/cert-manager|$CERT_MANAGER_VERSION|$CERT_MANAGER_SUM|deploy/crds|cert-manager.io_certificates.yaml cert-manager.io_issuers.yaml|cert-manager"
)

stamp="$(cat build.sh go.mod go.sum versions.env | sha256sum | cut -d' ' -f1)"
elapsed() { echo $(( $(date +%s) - start_s )); }

all_present() {
  [[ -x "$bin_dir/promtool" && -x "$bin_dir/helm" ]] || return 1
  [[ -f "$crd_dir/prometheus-operator/monitoring.coreos.com_prometheusrules.yaml" \
     && -f "$crd_dir/cert-manager/cert-manager.io_certificates.yaml" ]] || return 1
}

if [[ "${RAYKUEUE_FORCE_BUILD:-0}" != 1 && "$stamp" == "$(cat "$stamp_file" 2>/dev/null || true)" ]] \
    && all_present; then
  echo "tools/build.sh: promtool and helm up to date in $bin_dir ($(elapsed)s)"
  exit 0
fi

command -v go >/dev/null || { echo "tools/build.sh: go is not on PATH (needs Go >= 1.26)" >&2; exit 1; }
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"
jobs="${RAYKUEUE_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# versions.env names what go.mod pins (for the version strings): they must agree.
for pin in "github.com/prometheus/prometheus=$PROMETHEUS_VERSION" "helm.sh/helm/v4=$HELM_VERSION"; do
  got="$(go list -m -f '{{.Version}}' "${pin%%=*}")"
  [[ "$got" == "${pin#*=}" ]] || { echo "tools/build.sh: go.mod has ${pin%%=*} $got, versions.env ${pin#*=}" >&2; exit 1; }
done
ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}"
ldflags+=" -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION}"

echo "tools/build.sh: building promtool and helm into $bin_dir (go build -p $jobs; a cold build takes minutes)"
out="$(mktemp -d "$bin_dir/.build-tools.XXXXXX")"
trap 'rm -rf "$out"' EXIT
go mod download
go build -p "$jobs" -trimpath -tags remove_all_sd -ldflags "$ldflags" -o "$out/" \
  github.com/prometheus/prometheus/cmd/promtool helm.sh/helm/v4/cmd/helm
for b in promtool helm; do
  [[ -x "$out/$b" ]] || { echo "tools/build.sh: $b was not produced (have: $(ls "$out"))" >&2; exit 1; }
  mv -f "$out/$b" "$bin_dir/$b"
done

# The CRD modules are not dependencies of anything here: downloaded by version,
# outside this module, and checked against the sums pinned in versions.env.
for source in "${crd_sources[@]}"; do
  IFS='|' read -r module version sum folder files dest <<<"$source"
  info="$(cd "$out" && env -u GOFLAGS go mod download -json "$module@$version")"
  got_sum="$(sed -n 's/^\s*"Sum": "\(.*\)",$/\1/p' <<<"$info")"
  dir="$(sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p' <<<"$info")"
  if [[ "$got_sum" != "$sum" ]]; then
    echo "tools/build.sh: $module@$version has sum $got_sum, versions.env pins $sum" >&2
    exit 1
  fi
  rm -rf "${crd_dir:?}/$dest"; mkdir -p "$crd_dir/$dest"
  for f in $files; do install -m 0644 "$dir/$folder/$f" "$crd_dir/$dest/"; done
done

all_present || { echo "tools/build.sh: something is still missing under $bin_dir/.." >&2; exit 1; }
echo "$stamp" > "$stamp_file"
echo "tools/build.sh: promtool and helm ready in $bin_dir ($(elapsed)s)"
