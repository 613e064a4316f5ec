"""devstack: the real Kubernetes control plane for raykueue's tests, on loopback.

    python -m devstack up [--tier api|e2e|node]  start (or reuse / upgrade) a stack
    python -m devstack status                what runs, where, and its logs
    python -m devstack env                   shell exports for the running stack
    python -m devstack down                  stop it

Binaries come from controlplane/build.sh (RAYKUEUE_BIN_DIR); a stack lives in
RAYKUEUE_STACK_DIR (default ~/.cache/raykueue/stack) with its kubeconfig,
state.json and logs/. RAYKUEUE_KUEUE=minimal|shipped picks which Kueue it runs
(devstack/kueue/shipped.py). Tier node adds a real kubelet node (devstack/node/kubelet.py).
"""

from .config import TIERS, Nodes, Samples, StackConfig, default_bin_dir, default_stack_dir
from .controlplane.webhooks import register_webhooks, unregister_webhooks, webhook_configurations
from .stack import Stack, StackError, down, free_ports, release, stop_component, up

__all__ = [
    "TIERS",
    "Nodes",
    "Samples",
    "Stack",
    "StackConfig",
    "StackError",
    "default_bin_dir",
    "default_stack_dir",
    "down",
    "free_ports",
    "register_webhooks",
    "release",
    "stop_component",
    "unregister_webhooks",
    "up",
    "webhook_configurations",
]
