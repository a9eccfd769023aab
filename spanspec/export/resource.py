"""Resource detection: the attributes every exporting process describes itself with."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from spanspec.settings import Settings

# -- resource ---------------------------------------------------------------------------------

_SLURM_VARS = {
    "SLURM_JOB_ID": "slurm.job.id",
    "SLURM_ARRAY_JOB_ID": "slurm.array_job.id",
    "SLURM_ARRAY_TASK_ID": "slurm.array_task.id",
    "SLURM_JOB_NAME": "slurm.job.name",
    "SLURM_PROCID": "slurm.proc.id",
    "SLURM_NODEID": "slurm.node.id",
    "SLURM_LOCALID": "slurm.local.id",
    "SLURMD_NODENAME": "slurm.node.name",
}
_K8S_VARS = {
    "k8s.pod.name": ("K8S_POD_NAME", "POD_NAME"),
    "k8s.pod.uid": ("K8S_POD_UID", "POD_UID"),
    "k8s.namespace.name": ("K8S_NAMESPACE", "POD_NAMESPACE"),
    "k8s.node.name": ("K8S_NODE_NAME", "NODE_NAME"),
}
_K8S_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def base_resource_attributes(
    settings: Settings, env: Mapping[str, str] | None = None
) -> dict[str, str | int]:
    """Return ``service.name``, ``host.name``, ``process.pid`` and the SLURM / Kubernetes ids present.

    Kubernetes ids are read from the usual downward-API variables (``POD_NAME``, ``POD_NAMESPACE``,
    ``NODE_NAME``, ``POD_UID``, or their ``K8S_`` forms) when ``KUBERNETES_SERVICE_HOST`` is set.
    """
    env = os.environ if env is None else env
    attrs: dict[str, str | int] = {
        "service.name": settings.service_name,
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
    }
    for var, key in _SLURM_VARS.items():
        if env.get(var, "").strip():
            attrs[key] = env[var].strip()
    if env.get("KUBERNETES_SERVICE_HOST"):
        for key, names in _K8S_VARS.items():
            value = next((env[n].strip() for n in names if env.get(n, "").strip()), None)
            if value:
                attrs[key] = value
        if "k8s.pod.name" not in attrs and env.get("HOSTNAME"):
            attrs["k8s.pod.name"] = env["HOSTNAME"]
        if "k8s.namespace.name" not in attrs and os.path.exists(_K8S_NAMESPACE_FILE):
            try:
                attrs["k8s.namespace.name"] = Path(_K8S_NAMESPACE_FILE).read_text().strip()
            except OSError:
                pass
    return attrs
