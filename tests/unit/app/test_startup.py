"""Startup reporting, `--version`, the cert dir's given files, and explain's namespace."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from raykueue.app import cli
from raykueue.app.kubecontext import context_namespace
from raykueue.app.startup import StartupError
from raykueue.certs.store import HalfPair, ensure_certs


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("raykueue ") and out != "raykueue unknown (not installed)"


def test_a_flag_is_named_as_the_flag_a_variable_as_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYKUEUE_PODS_READY", "maybe")
    with pytest.raises(StartupError) as by_env:
        cli.settings_from({})
    assert "RAYKUEUE_PODS_READY=maybe:" in str(by_env.value)
    monkeypatch.delenv("RAYKUEUE_PODS_READY")
    with pytest.raises(StartupError) as by_flag:
        cli.settings_from({"log_level": "verbose"})
    assert "--log-level verbose: not a log level" in str(by_flag.value)
    assert "\n" not in str(by_env.value) + str(by_flag.value)


def test_a_cross_field_rule_says_which_variables_without_pydantics_prefix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYKUEUE_LEASE_SECONDS", "5")
    with pytest.raises(StartupError) as exc:
        cli.settings_from({})
    text = str(exc.value)
    assert "RAYKUEUE_RENEW_SECONDS < RAYKUEUE_LEASE_SECONDS" in text and "Value error" not in text


def test_the_log_level_is_checked_and_normalised() -> None:
    assert cli.settings_from({"log_level": "debug"}).log_level == "DEBUG"


@pytest.mark.parametrize(("given", "missing"), [
    ({"tls.crt"}, "tls.key"), ({"tls.key"}, "tls.crt"), ({"ca.crt"}, "ca.key"),
    ({"ca.crt", "tls.crt"}, "ca.key"),
])
def test_half_a_pair_is_refused_and_left_as_it_was(tmp_path: Path, given: set[str],
                                                   missing: str) -> None:
    for name in given:
        (tmp_path / name).write_text(f"the user's {name}\n")
    with pytest.raises(HalfPair) as exc:
        ensure_certs(tmp_path)
    assert exc.value.lacks.name == missing
    assert {p.name for p in tmp_path.iterdir()} == given
    for name in given:
        assert (tmp_path / name).read_text() == f"the user's {name}\n"


def test_a_serving_half_next_to_our_own_ca_is_reissued_from_it(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    (tmp_path / "tls.key").unlink()
    assert ensure_certs(tmp_path).generated


def kubeconfig(path: Path, namespace: str | None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "here", "context": context}],
    }))
    return path


def test_explain_takes_the_contexts_namespace_as_kubectl_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "env", "team-a")))
    assert context_namespace(None) == "team-a"
    assert context_namespace(str(kubeconfig(tmp_path / "flag", "team-b"))) == "team-b"
    assert context_namespace(str(kubeconfig(tmp_path / "none", None))) == "default"
    monkeypatch.delenv("KUBECONFIG")
    assert context_namespace(None) == "default"  # no configuration at all


def test_in_a_pod_explain_takes_the_pods_namespace(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    (tmp_path / "namespace").write_text("raykueue-system")
    assert context_namespace(None, tmp_path / "namespace") == "raykueue-system"
