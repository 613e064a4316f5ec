#!/usr/bin/env bash
# The pod sandbox ("pause") image for the node's containerd, made here: no
# registry is reachable for registry.k8s.io/pause. Kubernetes' own pause.c, from
# the Kubernetes module ../go.mod pins, compiled static as its Makefile does
# (build/pause/Makefile: -Os -Wall -Werror -static -DVERSION=...), in an image of
# that one file (buildah from scratch), exported as a docker-archive:
#
#   $RAYKUEUE_BIN_DIR/pause                 the binary
#   $RAYKUEUE_IMAGE_CACHE/pause.tar         localhost/raykueue-pause:<TAG>
#
# Called by build.sh; a no-op when both exist.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../versions.env
source "$here/../versions.env"
bin_dir="${RAYKUEUE_BIN_DIR:-$HOME/.cache/raykueue/bin}"
cache="${RAYKUEUE_IMAGE_CACHE:-$HOME/.cache/raykueue/image}"
mkdir -p "$bin_dir" "$cache"

kdir="$(cd "$here/.." && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
tag="$(sed -n 's/^TAG ?= //p' "$kdir/build/pause/Makefile")"
ref="localhost/raykueue-pause:$tag"
archive="$cache/pause.tar"
stamp="$ref $KUBERNETES_VERSION"
if [[ -x "$bin_dir/pause" && -f "$archive" && "$(cat "$cache/pause.stamp" 2>/dev/null)" == "$stamp" ]]; then
  exit 0
fi

missing=()
command -v gcc >/dev/null || missing+=(gcc)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/aarch64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
command -v buildah >/dev/null || missing+=(buildah)
if (( ${#missing[@]} )); then
  echo "pause.sh: apt-get install ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

gcc -Os -Wall -Werror -static -DVERSION="v$tag-raykueue" -o "$bin_dir/pause.new" "$kdir/build/pause/linux/pause.c"
mv -f "$bin_dir/pause.new" "$bin_dir/pause"

store=(--root "$cache/storage" --runroot "/run/raykueue-image-$(id -u)")
ctr="$(buildah "${store[@]}" from scratch)"
trap 'buildah "${store[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah "${store[@]}" copy "$ctr" "$bin_dir/pause" /pause >/dev/null
buildah "${store[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
buildah "${store[@]}" commit --quiet --format docker "$ctr" "$ref" >/dev/null
rm -f "$archive"
buildah "${store[@]}" push --quiet "$ref" "docker-archive:$archive.part:$ref"
mv -f "$archive.part" "$archive"
echo "$stamp" > "$cache/pause.stamp"
echo "pause.sh: $ref in $archive"
