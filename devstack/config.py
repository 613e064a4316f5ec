"""Where devstack finds its binaries and keeps a stack, and what a stack holds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# Each tier includes the ones before it; `node` adds the real node (devstack/node/kubelet.py).
TIERS = ("api", "e2e", "node")

REPO_ROOT = Path(__file__).resolve().parent.parent


# Which Kueue a stack runs: devstack/kueue/shipped.py says what each means.
KUEUE_MODES = ("minimal", "shipped")
KUEUE_MODE_ENV = "RAYKUEUE_KUEUE"


def check_kueue_mode(mode: str) -> str:
    if mode not in KUEUE_MODES:
        raise ValueError(f"{KUEUE_MODE_ENV} must be one of {', '.join(KUEUE_MODES)}, not {mode!r}")
    return mode


def default_kueue_mode() -> str:
    return check_kueue_mode(os.environ.get(KUEUE_MODE_ENV) or "shipped")


# Other Kueue / KubeRay versions than controlplane/versions.env pins: build.sh builds
# them from controlplane/versions/<name>-<version>/ into a bin dir of their own.
KUEUE_VERSION_ENV = "RAYKUEUE_KUEUE_VERSION"
KUBERAY_VERSION_ENV = "RAYKUEUE_KUBERAY_VERSION"
PINNED_VERSIONS = REPO_ROOT / "controlplane" / "versions.env"


def read_versions(path: Path) -> dict[str, str]:
    """NAME=value lines of a versions.env (comments and blanks skipped); {} if absent."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            out[name] = value
    return out


def versions_bin_dir(kueue: str, kuberay: str) -> Path:
    """Where build.sh puts a control plane with these Kueue and KubeRay versions (same formula)."""
    return Path.home() / ".cache/raykueue/versions" / f"kueue-{kueue}_kuberay-{kuberay}" / "bin"


def selected_versions(env: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(Kueue, KubeRay) when the environment selects another version than the pinned ones."""
    env = os.environ if env is None else env
    pinned = read_versions(PINNED_VERSIONS)
    kueue = env.get(KUEUE_VERSION_ENV) or pinned["KUEUE_VERSION"]
    kuberay = env.get(KUBERAY_VERSION_ENV) or pinned["KUBERAY_VERSION"]
    if (kueue, kuberay) == (pinned["KUEUE_VERSION"], pinned["KUBERAY_VERSION"]):
        return None
    return kueue, kuberay


def default_bin_dir() -> Path:
    if os.environ.get("RAYKUEUE_BIN_DIR"):
        return Path(os.environ["RAYKUEUE_BIN_DIR"])
    selected = selected_versions()
    if selected:
        return versions_bin_dir(*selected)
    return Path.home() / ".cache/raykueue/bin"


def default_stack_dir() -> Path:
    return Path(os.environ.get("RAYKUEUE_STACK_DIR") or Path.home() / ".cache/raykueue/stack")


def share_dir(bin_dir: Path) -> Path:
    """build.sh puts crds/ and kwok-stages/ beside the bin dir."""
    return bin_dir.parent


DEFAULT_QUOTA = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
DEFAULT_NODE_CAPACITY = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"}


@dataclass
class Samples:
    """The sample Kueue objects every stack starts with; e2e tests add their own."""

    flavor: str = "default-flavor"
    cluster_queue: str = "team-a"
    local_queue: str = "default"
    local_queue_namespace: str = "default"
    quota: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_QUOTA))
    priority_classes: dict[str, int] = field(
        default_factory=lambda: {"ray-head": 1000, "ray-worker": 100}
    )


@dataclass
class Nodes:
    count: int = 2
    prefix: str = "kwok-node-"
    capacity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_CAPACITY))


@dataclass
class StackConfig:
    stack_dir: Path = field(default_factory=default_stack_dir)
    bin_dir: Path = field(default_factory=default_bin_dir)
    samples: Samples = field(default_factory=Samples)
    nodes: Nodes = field(default_factory=Nodes)
    service_cluster_ip_range: str = "10.96.0.0/16"
    # seconds one component may take to become ready
    ready_timeout: float = 120.0
    # Deep-merged over the generated Kueue configuration (config.kueue.x-k8s.io/v1beta2),
    # e.g. {"waitForPodsReady": {"timeout": "5m"}, "featureGates": {...}}.
    kueue_config: dict = field(default_factory=dict)
    # "shipped" (Kueue as users install it, the default) or "minimal" (batch/job only,
    # no Kueue webhooks: only for a test that says why); devstack/kueue/shipped.py.
    # Default from RAYKUEUE_KUEUE.
    kueue_mode: str = field(default_factory=default_kueue_mode)

    @property
    def share_dir(self) -> Path:
        return share_dir(self.bin_dir)

    @property
    def versions(self) -> dict[str, str]:
        """What the bin dir was built with (build.sh writes versions.env beside it)."""
        return read_versions(self.share_dir / "versions.env")

    @property
    def kueue_version(self) -> str | None:
        return self.versions.get("KUEUE_VERSION")

    @property
    def crd_dir(self) -> Path:
        return self.share_dir / "crds"

    @property
    def stage_dir(self) -> Path:
        return self.share_dir / "kwok-stages"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name  # an absolute `name` stays itself (pathlib)
