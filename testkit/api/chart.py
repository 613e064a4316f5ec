"""What tests/api/test_chart_api.py shares with other tests (so that no test module imports another). That
module: The Helm chart's output validates against the real kube-apiserver.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from devstack.config import default_bin_dir

ROOT = Path(__file__).resolve().parents[2]


CHART = ROOT / "charts" / "raykueue"


def template(namespace: str, *sets: str) -> list[dict[str, Any]]:
    helm = default_bin_dir() / "helm"
    args = [str(helm), "template", "raykueue", str(CHART), "--namespace", namespace,
            "--set", "createNamespace=false"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]
