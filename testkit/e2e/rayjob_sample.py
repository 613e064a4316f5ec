"""The RayJob of KubeRay's documentation and the ConfigMap it mounts, as the RayJob tests create it."""

from __future__ import annotations

from typing import Any

from raykueue.kube import resources as r

CONFIG_MAPS = r.Resource("", "v1", "configmaps")
IMAGE = "rayproject/ray:2.52.0"
# KubeRay v1.6.0 ray-operator/config/samples/ray-job.sample.yaml, comments left out.
DOCUMENTED: dict[str, Any] = {
    "apiVersion": "ray.io/v1", "kind": "RayJob",
    "metadata": {"name": "rayjob-sample"},
    "spec": {
        "entrypoint": "python /home/ray/samples/sample_code.py",
        "runtimeEnvYAML": "pip:\n  - requests==2.26.0\n  - pendulum==2.1.2\n"
                          "env_vars:\n  counter_name: \"test_counter\"\n",
        "rayClusterSpec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{
                    "name": "ray-head", "image": IMAGE,
                    "ports": [{"containerPort": 6379, "name": "gcs-server"},
                              {"containerPort": 8265, "name": "dashboard"},
                              {"containerPort": 10001, "name": "client"}],
                    "resources": {"limits": {"cpu": "1", "memory": "5Gi"},
                                  "requests": {"cpu": "1", "memory": "2Gi"}},
                    "volumeMounts": [{"mountPath": "/home/ray/samples", "name": "code-sample"}]}],
                "volumes": [{"name": "code-sample", "configMap": {
                    "name": "ray-job-code-sample",
                    "items": [{"key": "sample_code.py", "path": "sample_code.py"}]}}],
            }}},
            "workerGroupSpecs": [{
                "replicas": 1, "minReplicas": 1, "maxReplicas": 5, "groupName": "small-group",
                "rayStartParams": {},
                "template": {"spec": {"containers": [{
                    "name": "ray-worker", "image": IMAGE,
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}}}]}}}],
        },
    },
}
CODE_SAMPLE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ray-job-code-sample"},
               "data": {"sample_code.py": "import ray\nray.init()\n"}}
