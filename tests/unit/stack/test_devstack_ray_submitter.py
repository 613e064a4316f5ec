"""devstack/ray/submitter.py: a SidecarMode submitter's script, aimed at the local dashboard."""

from __future__ import annotations

from devstack.ray.submitter import argv, ended_statuses, sidecar_script

# As KubeRay v1.6.0 writes it for a head whose dashboard port is 8265 (shortened).
SCRIPT = ("until python -c \"import urllib.request; r=urllib.request.urlopen('http://localhost:8265/"
          "api/gcs_healthz', timeout=5); exit(0 if b'success' in r.read() else 1)\" >/dev/null 2>&1 ; "
          "do echo \"Waiting for Ray Dashboard GCS to become healthy at http://127.0.0.1:8265 ...\" ; "
          "sleep 2 ; done ; ray job submit --address http://127.0.0.1:8265 --submission-id job-x "
          "-- python run.py --port 8265 ;")


def head_pod(*containers: dict) -> dict:
    return {"spec": {"containers": [{"name": "ray-head"}, *containers]}}


def test_the_sidecars_script_is_run_against_the_local_dashboard() -> None:
    pod = head_pod({"name": "ray-job-submitter", "command": ["/bin/bash", "-ce", "--"], "args": [SCRIPT]})
    script = sidecar_script(pod)
    assert script == SCRIPT
    shell, options, end, local = argv(script, 40123)
    assert (shell, options, end) == ("bash", "-ce", "--")
    assert "localhost:40123/api/gcs_healthz" not in local and "127.0.0.1:40123/api/gcs_healthz" in local
    assert "--address http://127.0.0.1:40123 --submission-id job-x" in local
    assert ":8265/" not in local and "8265 ..." not in local
    assert "--port 8265" in local  # only addresses change, never the entrypoint's own arguments


def test_a_head_without_a_submitter_container_runs_none() -> None:
    assert sidecar_script(head_pod()) is None


def test_the_submitters_end_is_written_as_a_kubelet_would_and_nothing_else_changes() -> None:
    running = {"running": {"startedAt": "t0"}}
    pod = {"status": {"containerStatuses": [
        {"name": "ray-head", "ready": True, "started": True, "state": running},
        {"name": "ray-job-submitter", "ready": True, "started": True, "state": running}]}}
    head, sub = ended_statuses(pod, 0, "t1", "t2")
    assert head == pod["status"]["containerStatuses"][0]
    assert sub["state"] == {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "t1",
                                           "finishedAt": "t2"}}
    assert not sub["ready"]
    assert ended_statuses(pod, 3, "t1", "t2")[1]["state"]["terminated"]["reason"] == "Error"
