"""Every kustomize directory the docs name builds on the oldest kustomize README claims.

kubectl 1.32 (kustomize v5.5.0) panicked on `kubectl apply -k examples/cert-manager/`
and `examples/another-namespace/`: two `$patch: delete` documents in one patch file
(nil pointer in kyaml's RNode.Content; fixed in kustomize v5.7). Only the stack's
kubectl (1.36) was tested. Here each directory is built by both, and must give the
same objects.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from testkit.kustomizes import OLDEST_KUSTOMIZE, ROOT, documented_dirs, oldest_kustomize

DIRS = documented_dirs()


def test_the_docs_name_the_directories_users_apply() -> None:
    # The extraction itself: a doc reworded so that none is found would pass vacuously.
    assert {"manifests/", "manifests/components/priorities/", "examples/", "examples/cert-manager/",
            "examples/another-namespace/", "examples/monitoring/"} <= set(DIRS)


@pytest.mark.parametrize("path", DIRS)
def test_oldest_kustomize_builds_what_the_stacks_kubectl_builds(kubectl, path: str) -> None:
    old = subprocess.run([str(oldest_kustomize()), "build", path], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert old.returncode == 0, f"kustomize {OLDEST_KUSTOMIZE} build {path}:\n{old.stderr[:2000]}"
    new = kubectl("kustomize", path, cwd=ROOT)
    assert new.returncode == 0, new.stderr

    def objects(text: str) -> dict[tuple[str, str], dict]:
        docs = [d for d in yaml.safe_load_all(text) if d]
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    built_old, built_new = objects(old.stdout), objects(new.stdout)
    assert sorted(built_old) == sorted(built_new)
    for key, obj in built_new.items():
        assert built_old[key] == obj, key
