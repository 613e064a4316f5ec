"""Find credentials for an API server and check that it answers."""

from __future__ import annotations

import copy
import logging
import os
import threading
from dataclasses import dataclass

from kubernetes.client import ApiClient, Configuration
from kubernetes.config import ConfigException
from kubernetes.config.incluster_config import load_incluster_config
from kubernetes.config.kube_config import load_kube_config

from raykueue.kube.rest import ApiError, Rest

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = "~/.kube/config"

_logged: set[str] = set()
_logged_lock = threading.Lock()


class ClusterConfigError(Exception):
    """A cluster is configured (in a pod, or a kubeconfig named) but cannot be used as it is."""


@dataclass(frozen=True, slots=True)
class Configured:
    """The API server a configuration names, not yet asked anything."""

    config: Configuration
    source: str  # where the configuration came from, for messages

    @property
    def host(self) -> str:
        return str(self.config.host)


def configured(kubeconfig: str | None) -> Configured | None:
    """The configured API server, or None when no cluster is configured at all.

    Order, as client-go's clientcmd and controller-runtime resolve it: the
    `kubeconfig` argument, then `KUBECONFIG`, then the in-cluster service
    account (when KUBERNETES_SERVICE_HOST is set), then ~/.kube/config. A
    kubeconfig someone named wins over in-cluster, so that a process inside a
    pod (CI, a debug shell, a test) goes where it was pointed, not to the
    cluster it happens to run in. Raises ClusterConfigError when the chosen
    configuration cannot be loaded (a named file missing, a pod without its
    service account token).
    """
    config = Configuration()
    try:
        source = _configure(config, kubeconfig)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        # Loader messages name files and fields, never token values.
        raise ClusterConfigError(
            f"kubernetes configuration unusable: {type(exc).__name__}: {exc}") from exc
    return None if source is None else Configured(config, source)


def load_api_client(kubeconfig: str | None, *, probe_timeout: float = 3.0) -> ApiClient | None:
    """A client for the configured API server, or None if there is none or it does not answer.

    For one-shot commands (`raykueue explain`, `raykueue certs`); the server
    itself never gives up on a configured cluster (app.runtime). The server
    must answer GET /version within `probe_timeout` seconds.
    """
    try:
        found = configured(kubeconfig)
    except ClusterConfigError as exc:
        _log_once(str(exc))
        return None
    if found is None:
        _log_once("no kubernetes configuration: not in a cluster, no kubeconfig found")
        return None

    problem = probe(found.config, probe_timeout)
    if problem:
        _log_once(f"kubernetes API at {found.host} ({found.source}) not usable: {problem}")
        return None
    return ApiClient(found.config)


def probe(config: Configuration, timeout: float) -> str | None:
    """Why the server is not usable, or None if it answers GET /version."""
    # A throwaway client without urllib3's retries: the timeout is then a
    # real bound, and an absent server costs one log line, not four.
    probe_config = copy.deepcopy(config)
    probe_config.retries = False
    with ApiClient(probe_config) as probe:
        try:
            Rest(probe).get("/version", timeout=timeout)
        except ApiError as exc:
            # 403: reachable and authenticated, /version merely locked down.
            return None if exc.status == 403 else str(exc)
    return None


def _configure(config: Configuration, kubeconfig: str | None) -> str | None:
    """Fill `config`; returns a description of where it came from."""
    if kubeconfig:
        load_kube_config(config_file=kubeconfig, client_configuration=config,
                         persist_config=False)
        return f"kubeconfig {kubeconfig}"
    env = os.environ.get("KUBECONFIG", "")
    paths = [p for p in env.split(os.pathsep) if p and os.path.exists(os.path.expanduser(p))]
    if paths:
        load_kube_config(config_file=os.pathsep.join(paths), client_configuration=config,
                         persist_config=False)
        return f"KUBECONFIG {os.pathsep.join(paths)}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        load_incluster_config(client_configuration=config)
        return "in-cluster service account"
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
