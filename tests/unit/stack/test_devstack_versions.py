"""Which Kueue and KubeRay a stack runs: the pinned ones, or a version the environment
selects (controlplane/build.sh builds it into a bin dir of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import config as cfg
from devstack.kueue import shipped as ks

PINNED = cfg.read_versions(cfg.PINNED_VERSIONS)


def test_read_versions_skips_comments_and_blanks(tmp_path: Path) -> None:
    path = tmp_path / "versions.env"
    path.write_text("# a comment\n\nKUEUE_VERSION=v0.15.0\nKUBERAY_VERSION=v1.7.0\n")
    assert cfg.read_versions(path) == {"KUEUE_VERSION": "v0.15.0", "KUBERAY_VERSION": "v1.7.0"}
    assert cfg.read_versions(tmp_path / "absent.env") == {}


def test_the_pinned_versions_select_nothing() -> None:
    assert cfg.selected_versions({}) is None
    pinned = {cfg.KUEUE_VERSION_ENV: PINNED["KUEUE_VERSION"],
              cfg.KUBERAY_VERSION_ENV: PINNED["KUBERAY_VERSION"]}
    assert cfg.selected_versions(pinned) is None


def test_one_other_version_selects_both_with_the_pinned_one_beside_it() -> None:
    assert cfg.selected_versions({cfg.KUEUE_VERSION_ENV: "v0.15.0"}) == ("v0.15.0", PINNED["KUBERAY_VERSION"])
    assert cfg.selected_versions({cfg.KUBERAY_VERSION_ENV: "v1.7.0"}) == (PINNED["KUEUE_VERSION"], "v1.7.0")


def test_the_bin_dir_follows_the_selection_unless_given(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.delenv("RAYKUEUE_BIN_DIR", raising=False)
    monkeypatch.delenv(cfg.KUBERAY_VERSION_ENV, raising=False)
    monkeypatch.setenv(cfg.KUEUE_VERSION_ENV, "v0.15.0")
    want = Path.home() / ".cache/raykueue/versions" / f"kueue-v0.15.0_kuberay-{PINNED['KUBERAY_VERSION']}/bin"
    assert cfg.default_bin_dir() == want
    monkeypatch.setenv("RAYKUEUE_BIN_DIR", str(tmp_path))
    assert cfg.default_bin_dir() == tmp_path
    monkeypatch.delenv("RAYKUEUE_BIN_DIR")
    monkeypatch.delenv(cfg.KUEUE_VERSION_ENV)
    assert cfg.default_bin_dir() == Path.home() / ".cache/raykueue/bin"


def test_build_sh_names_the_bin_dir_as_devstack_does() -> None:
    """The two must agree, or a stack would look for binaries build.sh never wrote."""
    script = (cfg.REPO_ROOT / "controlplane" / "build.sh").read_text()
    assert ('"$HOME/.cache/raykueue/versions/kueue-${KUEUE_VERSION}_kuberay-${KUBERAY_VERSION}/bin"'
            in script)
    want = Path.home() / ".cache/raykueue/versions/kueue-vA_kuberay-vB/bin"
    assert cfg.versions_bin_dir("vA", "vB") == want


def test_every_version_module_builds_what_build_sh_expects() -> None:
    """controlplane/versions/<component>-<v>/go.mod requires exactly that module at that version."""
    modules = {"kueue": "sigs.k8s.io/kueue", "kuberay": "github.com/ray-project/kuberay/ray-operator"}
    folders = sorted((cfg.REPO_ROOT / "controlplane" / "versions").glob("*-v*"))
    assert folders
    for folder in folders:
        component, version = folder.name.split("-", 1)
        assert ks.pinned_version((folder / "go.mod").read_text(), modules[component]) == version
        assert (folder / "go.sum").is_file()


def test_a_stack_reads_kueue_from_the_version_its_bin_dir_was_built_with(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "versions.env").write_text("KUEUE_VERSION=v0.15.0\nKUBERAY_VERSION=v1.7.0\n")
    config = cfg.StackConfig(bin_dir=tmp_path / "bin")
    assert config.kueue_version == "v0.15.0"
    assert cfg.StackConfig(bin_dir=tmp_path / "elsewhere" / "bin").kueue_version is None


def test_the_kueue_module_dir_is_the_version_asked_for(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    ks.kueue_module_dir.cache_clear()
    try:
        root = tmp_path / "sigs.k8s.io" / "kueue@v0.15.0"
        (root / ks.MANAGER_CONFIG).parent.mkdir(parents=True)
        (root / ks.MANAGER_CONFIG).write_text("kind: Configuration\n")
        assert ks.kueue_module_dir("v0.15.0") == root
        with pytest.raises(FileNotFoundError, match=r"v0\.14\.0"):
            ks.kueue_module_dir("v0.14.0")
    finally:
        ks.kueue_module_dir.cache_clear()
