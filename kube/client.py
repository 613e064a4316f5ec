"""Find credentials for an API server and check that it answers."""

from __future__ import annotations

import logging
import os
import threading

from kubernetes.client import ApiClient, Configuration
from kubernetes.config import ConfigException
from kubernetes.config.incluster_config import load_incluster_config
from kubernetes.config.kube_config import load_kube_config

from kube.rest import ApiError, Rest

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = "~/.kube/config"

_logged: set[str] = set()
_logged_lock = threading.Lock()


def load_api_client(kubeconfig: str | None, *, probe_timeout: float = 3.0) -> ApiClient | None:
    """A client for the configured API server, or None if there is none.

    Order: the `kubeconfig` argument, then in-cluster service account (when
    KUBERNETES_SERVICE_HOST is set), then `KUBECONFIG`, then ~/.kube/config.
    An explicit path wins over in-cluster so that a process running inside a
    pod (CI, a debug shell) can still be pointed at another cluster; this is
    the order client-go's tooling uses too.

    The server must answer GET /version within `probe_timeout` seconds.
    """
    config = Configuration()
    try:
        source = _configure(config, kubeconfig)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        # Loader messages name files and fields, never token values.
        _log_once(f"kubernetes configuration unusable: {type(exc).__name__}: {exc}")
        return None
    if source is None:
        _log_once("no kubernetes configuration: not in a cluster, no kubeconfig found")
        return None

    client = ApiClient(config)
    try:
        Rest(client).get("/version", timeout=probe_timeout)
    except ApiError as exc:
        if exc.status == 403:
            # Reachable and authenticated; /version is merely locked down.
            return client
        client.close()
        _log_once(f"kubernetes API at {config.host} ({source}) not usable: {exc}")
        return None
    return client


def _configure(config: Configuration, kubeconfig: str | None) -> str | None:
    """Fill `config`; returns a description of where it came from."""
    if kubeconfig:
        load_kube_config(config_file=kubeconfig, client_configuration=config,
                         persist_config=False)
        return f"kubeconfig {kubeconfig}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        load_incluster_config(client_configuration=config)
        return "in-cluster service account"
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p and os.path.exists(os.path.expanduser(p))]
    if paths:
        load_kube_config(config_file=os.pathsep.join(paths), client_configuration=config,
                         persist_config=False)
        return f"KUBECONFIG {os.pathsep.join(paths)}"
    default = os.path.expanduser(DEFAULT_KUBECONFIG)
    if os.path.exists(default):
        load_kube_config(config_file=default, client_configuration=config,
                         persist_config=False)
        return f"kubeconfig {default}"
    return None


def _log_once(message: str) -> None:
    # Callers retry in a loop until the cluster shows up; say why once.
    with _logged_lock:
        first = message not in _logged
        _logged.add(message)
    if first:
        log.warning("%s", message)
    else:
        log.debug("%s", message)
