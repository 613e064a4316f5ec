#!/usr/bin/env bash
# Regenerates the `replace k8s.io/<staging> => k8s.io/<staging> vX` block of go.mod.
#
# k8s.io/kubernetes requires every staging module at v0.0.0 and replaces it with a
# local folder, so a wrapper module must replace each of them with the published
# version. The list is read from that version's own go.mod, never typed by hand
# (1.36 added cri-streaming and streaming, for instance).
#
# Usage: controlplane/gen-replaces.sh          (rewrites go.mod in place)
#        controlplane/gen-replaces.sh --check  (exit 1 if go.mod is out of date)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
# shellcheck source=versions.env
source ./versions.env

kmod="$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$kmod" ]] || { echo "gen-replaces: cannot find go.mod of k8s.io/kubernetes@${KUBERNETES_VERSION}" >&2; exit 1; }

mapfile -t staging < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$kmod" | sort -u)
(( ${#staging[@]} > 20 )) || { echo "gen-replaces: only ${#staging[@]} staging modules found in $kmod" >&2; exit 1; }

args=()
for m in "${staging[@]}"; do
  args+=("-replace=${m}=${m}@${KUBERNETES_STAGING_VERSION}")
done

if [[ "${1:-}" == "--check" ]]; then
  tmp="$(mktemp)"; trap 'rm -f "$tmp"' EXIT
  cp go.mod "$tmp"
  go mod edit "${args[@]}" "$tmp"
  if ! cmp -s go.mod "$tmp"; then
    echo "gen-replaces: go.mod's staging replaces are out of date; run controlplane/gen-replaces.sh" >&2
    diff -u go.mod "$tmp" >&2 || true
    exit 1
  fi
  exit 0
fi

go mod edit "${args[@]}"
echo "gen-replaces: ${#staging[@]} staging modules replaced with ${KUBERNETES_STAGING_VERSION}"
