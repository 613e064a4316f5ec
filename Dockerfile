# syntax=docker/dockerfile:1
# raykueue: admission webhooks + controller. Build: docker build -t raykueue:latest .
ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: resolve and install the project into a self-contained venv ------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml ./
COPY raykueue ./raykueue
# Every dependency ships manylinux wheels: no compiler is needed, and none
# reaches the final image either way. pip byte-compiles what it installs, so
# the read-only runtime never needs to write __pycache__. pip itself is then
# removed: the final image installs nothing. .ci/run repeats these steps
# (wheel, clean venv, `raykueue serve`) where no Docker engine is available.
RUN pip install . && pip uninstall --yes pip

# --- runtime: the interpreter and the venv, nothing else -------------------------
# Same base image as the builder: the venv's python symlinks to its interpreter.
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="raykueue" \
      org.opencontainers.image.description="Per-pod Kueue admission for autoscaled KubeRay clusters"
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    RAYKUEUE_CERT_DIR=/tmp/certs
# No /etc/passwd entry needed: numeric, non-root, matches the manifests'
# runAsUser/runAsGroup.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9443
# Kubernetes probes /healthz and /readyz over HTTPS; no Docker healthcheck.
HEALTHCHECK NONE
ENTRYPOINT ["raykueue"]
CMD ["serve"]
