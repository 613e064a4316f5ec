"""What a component's declaration sees of the stack it runs in.

`handle.Stack` reads the declarations (`components.COMPONENTS`, and Kueue's in
`kueue_shipped`) to start each process, and the declarations' functions take
the stack back as an argument. They name this protocol, which `handle.Stack`
satisfies, rather than `Stack` itself, so the imports run one way
(handle -> components -> stackview) instead of in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .config import StackConfig
from .controlplane.kubeapi import KubeApi
from .procs import Proc

# One line of progress for whoever waits on `up`.
Log = Callable[[str], None]


class StackView(Protocol):
    config: StackConfig
    dir: Path

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def pki_dir(self) -> Path: ...

    @property
    def ca_file(self) -> Path: ...

    @property
    def procs(self) -> dict[str, Proc]: ...

    @property
    def kueue_mode(self) -> str: ...

    @property
    def ports(self) -> dict[str, int]: ...

    @property
    def etcd_data(self) -> str | None: ...

    @property
    def api(self) -> KubeApi: ...

    def binary(self, name: str) -> Path: ...

    def record(self, **changes: Any) -> None: ...

    def write_kubeconfig(self, server: str | None = None) -> None: ...
