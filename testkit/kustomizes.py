"""The kustomize directories the docs tell users to apply, and the oldest kustomize claimed.

README says kubectl 1.32 or later, whose `kubectl kustomize` / `apply -k` is kustomize
v5.5.0. That version is built from its Go module into ~/.cache/raykueue (never the
repo) the first time a test needs it: about a minute cold on 2 cores, then cached.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The one kubectl 1.32 embeds (`kubectl version` there prints "Kustomize Version: v5.5.0").
OLDEST_KUSTOMIZE = "v5.5.0"
# The install docs, and each example's own header ("kubectl apply -k examples/.../").
DOCS = ("README.md", "manifests/README.md", "examples/kustomization.yaml",
        *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("examples/*/kustomization.yaml")))
_APPLIED = re.compile(r"kubectl (?:apply|delete) -k ([\w./-]+)")


def documented_dirs() -> list[str]:
    """Every `kubectl apply|delete -k DIR` in the install docs, once each, as written."""
    found: dict[str, None] = {}
    for doc in DOCS:
        for path in _APPLIED.findall((ROOT / doc).read_text()):
            found.setdefault(path.rstrip("/") + "/")
    return list(found)


def oldest_kustomize() -> Path:
    """kustomize OLDEST_KUSTOMIZE, built with `go install` when not cached."""
    home = Path(os.environ.get("RAYKUEUE_CACHE", Path.home() / ".cache" / "raykueue"))
    gobin = home / f"kustomize-{OLDEST_KUSTOMIZE}"
    binary = gobin / "kustomize"
    if binary.exists():
        return binary
    gobin.mkdir(parents=True, exist_ok=True)
    # One build at a time (helpers and CI share the cache); the second finds it built.
    with (gobin / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            done = subprocess.run(
                ["go", "install", f"sigs.k8s.io/kustomize/kustomize/v5@{OLDEST_KUSTOMIZE}"],
                env={**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-mod=mod"}, cwd=gobin,
                capture_output=True, text=True, timeout=1200)
            if done.returncode != 0:
                raise RuntimeError(f"building kustomize {OLDEST_KUSTOMIZE}:\n{done.stderr}")
    return binary
