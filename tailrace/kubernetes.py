"""`tailrace deploy kubernetes PROFILE --image IMAGE --out DIR`: Kubernetes manifests rendered from the profile, so
regions, shares and workers have one source of truth.

One cluster: a namespace; a ConfigMap with the profile (and the data files it names, when they fit); the master
as a Job with a Service and a volume for the run directory; per region a worker Job (Indexed: `workers` pods,
each its worker index) scheduled onto that region's nodes; a NetworkPolicy that lets only workers reach the
master's ports; a reader Pod to copy the report out. `--per-cluster`: one directory per cluster (regions name
theirs, `cluster`); the master's cluster exposes the master through a LoadBalancer limited to the workers'
source ranges, the other clusters' workers reach it at `--master-address`.

The run token and endpoint credentials are Secret references, never values. CPU requests equal limits in whole
CPUs and memory requests equal limits (Guaranteed QoS): a throttled generator sends late, and send lag is what
tailrace measures against. The commands are tailrace/command_lines.py's, the ones the multi-host test runs.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tailrace.command_lines import MASTER_PORT, SNTP_PORT, master_args, worker_args
from tailrace.contract.exit_codes import WORKER_MASTER_LOST
from tailrace.contract.profile import Profile

NAMESPACE = "tailrace"
TOKEN_SECRET, TOKEN_KEY = "tailrace-run-token", "token"
CREDENTIALS_SECRET = "tailrace-endpoint-credentials"
FILES_SECRET = "tailrace-endpoint-files"  # auth_file and tls files, mounted as directories (so rotations reach them)
PROFILE_PATH, WORKDIR, RESULTS, SPOOL = "/etc/tailrace/profile.toml", "/work", "/results", "/spool"
CONFIGMAP_LIMIT = 900 * 1024  # a ConfigMap holds at most 1 MiB
LABEL = "app.kubernetes.io"


class DeployError(ValueError):
    """A deployment that cannot be rendered (the message names the flag or field)."""


@dataclass(frozen=True)
class Resources:
    """Per pod, requests = limits (Guaranteed QoS)."""

    worker_cpus: int = 1
    worker_memory: str = "1Gi"
    master_cpus: int = 1
    master_memory: str = "2Gi"
    results_storage: str = "5Gi"


def _labels(component: str, region: str | None = None) -> dict:
    labels = {f"{LABEL}/name": "tailrace", f"{LABEL}/component": component}
    return labels | ({"tailrace-region": region} if region else {})


def _resources(cpus: int, memory: str) -> dict:
    amount = {"cpu": str(cpus), "memory": memory}
    return {"requests": dict(amount), "limits": dict(amount)}


def _security() -> tuple[dict, dict]:
    pod = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
           "seccompProfile": {"type": "RuntimeDefault"}}
    container = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                 "capabilities": {"drop": ["ALL"]}}
    return pod, container


def _env(profile: Profile) -> list[dict]:
    """The run token and every endpoint credential, as Secret references."""
    env: list[dict] = [{"name": "HOME", "value": "/tmp"}, {"name": "MPLCONFIGDIR", "value": "/tmp"},  # the root fs is read-only
           {"name": "TAILRACE_RUN_TOKEN", "valueFrom": {"secretKeyRef": {"name": TOKEN_SECRET, "key": TOKEN_KEY}}}]
    for name in sorted({e.auth_env for e in profile.endpoints if e.auth_env}):
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": CREDENTIALS_SECRET, "key": name}}})
    return env


def data_files(profile: Profile, profile_path: Path) -> dict[str, Path]:
    """The data files the profile names (relative path as written → the file here)."""
    out = {}
    for e in profile.endpoints:
        if e.data and e.data not in ("random", "zero"):
            for base in (Path.cwd(), profile_path.parent):
                if (base / e.data).is_file():
                    out[e.data] = base / e.data
                    break
    return out


def _configmap_key(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", path)


def endpoint_files(profile: Profile) -> list[str]:
    """The files the profile's endpoints read at their own paths: auth_file and the tls ca / cert / key. They come
    from one Secret; a relative path is a DeployError naming the field."""
    out = []
    for i, e in enumerate(profile.endpoints):
        named = [("auth_file", e.auth_file)] + ([(f"tls.{k}", getattr(e.tls, k)) for k in ("ca", "cert", "key")]
                                                 if e.tls else [])
        for field, path in named:
            if path is None:
                continue
            if not path.startswith("/") or Path(path).parent == Path("/"):
                raise DeployError(f"endpoints[{i}].{field}: {path!r} — a deployment mounts it from the Secret "
                                  f"{FILES_SECRET}: give an absolute path in a directory of its own, e.g. "
                                  "/etc/tailrace/secrets/token")
            out.append(path)
    return sorted(set(out))


def _secret_file_volumes(files: list[str]) -> tuple[list[dict], list[dict]]:
    """One Secret volume per directory the files live in, mounted whole (never by subPath: the kubelet updates
    only whole mounts when the Secret rotates, and auth_file is re-read when it changes)."""
    volumes, mounts = [], []
    directories = sorted({str(Path(f).parent) for f in files})
    for j, directory in enumerate(directories):
        items = [{"key": _configmap_key(f), "path": Path(f).name} for f in files if str(Path(f).parent) == directory]
        volumes.append({"name": f"endpoint-files-{j}", "secret": {"secretName": FILES_SECRET, "items": items}})
        mounts.append({"name": f"endpoint-files-{j}", "mountPath": directory, "readOnly": True})
    return volumes, mounts


def secret_commands(profile: Profile, namespace: str = NAMESPACE) -> list[str]:
    """The kubectl commands that create the Secrets the manifests reference (values from the user's files and
    environment; never written by tailrace)."""
    variables = sorted({e.auth_env for e in profile.endpoints if e.auth_env})
    files = endpoint_files(profile)
    out = [f"kubectl -n {namespace} create secret generic {TOKEN_SECRET} --from-file={TOKEN_KEY}=run-token"]
    if variables:
        out.append(f"kubectl -n {namespace} create secret generic {CREDENTIALS_SECRET} "
                   + " ".join(f'--from-literal={v}="${v}"' for v in variables))
    if files:
        out.append(f"kubectl -n {namespace} create secret generic {FILES_SECRET} "
                   + " ".join(f"--from-file={_configmap_key(f)}=LOCAL-COPY-OF{f}" for f in files))
    return out


def _volumes(data: dict[str, Path], with_data: bool, files: Sequence[str] = ()) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): the profile at PROFILE_PATH, its data files under WORKDIR at the paths it names, the
    endpoints' credential and TLS files from their Secret, and writable scratch (the root filesystem is
    read-only)."""
    items = [{"key": "profile.toml", "path": "profile.toml"}]
    volumes: list[dict] = [{"name": "profile", "configMap": {"name": "tailrace-profile", "items": items}},
               {"name": "tmp", "emptyDir": {}}]
    mounts: list[dict] = [{"name": "profile", "mountPath": str(Path(PROFILE_PATH).parent), "readOnly": True},
              {"name": "tmp", "mountPath": "/tmp"}]
    if with_data and data:
        volumes.append({"name": "data", "configMap": {"name": "tailrace-data", "items": [
            {"key": _configmap_key(rel), "path": _configmap_key(rel)} for rel in data]}})
        mounts += [{"name": "data", "mountPath": f"{WORKDIR}/{rel.lstrip('/')}", "subPath": _configmap_key(rel),
                    "readOnly": True} for rel in data]
    secret_volumes, secret_mounts = _secret_file_volumes(list(files))
    return volumes + secret_volumes, mounts + secret_mounts


def _configmaps(profile_text: str, data: dict[str, Path], namespace: str) -> tuple[list[dict], bool]:
    """The profile's ConfigMap and, when the data files fit in one, theirs; whether the data is included."""
    docs = [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "tailrace-profile", "namespace": namespace, "labels": _labels("profile")},
             "data": {"profile.toml": profile_text}}]
    size = sum(p.stat().st_size for p in data.values())
    if data and size <= CONFIGMAP_LIMIT:
        import base64

        docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "tailrace-data", "namespace": namespace, "labels": _labels("data")},
                     "binaryData": {_configmap_key(rel): base64.b64encode(p.read_bytes()).decode()
                                    for rel, p in data.items()}})
        return docs, True
    return docs, not data


def _pod_spec(container: dict, volumes: list[dict], node_selector: dict | None = None) -> dict:
    pod_security, container_security = _security()
    spec = {"restartPolicy": "Never", "securityContext": pod_security, "automountServiceAccountToken": False,
            "containers": [container | {"securityContext": container_security, "workingDir": WORKDIR}],
            "volumes": volumes}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return spec


def master_docs(profile: Profile, image: str, namespace: str, res: Resources, data_included: bool,
                data: dict[str, Path], exposed_to: list[str] | None, wait_s: float) -> list[dict]:
    """The master: its results volume, Job, Service (ClusterIP, or a LoadBalancer limited to `exposed_to`) and
    the NetworkPolicy that admits only workers (pods in this cluster, or the workers' source ranges)."""
    volumes, mounts = _volumes(data, data_included, endpoint_files(profile))
    volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": "tailrace-results"}})
    mounts.append({"name": "results", "mountPath": RESULTS})
    container = {"name": "master", "image": image, "imagePullPolicy": "IfNotPresent",
                 "args": master_args(PROFILE_PATH, bind="0.0.0.0", out=RESULTS, wait_s=wait_s, quiet=True,
                                     overrides=profile.overrides),
                 "env": _env(profile),
                 "ports": [{"name": "locust", "containerPort": MASTER_PORT, "protocol": "TCP"},
                           {"name": "sntp", "containerPort": SNTP_PORT, "protocol": "UDP"}],
                 "resources": _resources(res.master_cpus, res.master_memory), "volumeMounts": mounts}
    meta = {"namespace": namespace, "labels": _labels("master")}
    service_spec: dict[str, object] = {"selector": _labels("master"), "ports": [
        {"name": "locust", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"},
        {"name": "sntp", "port": SNTP_PORT, "targetPort": SNTP_PORT, "protocol": "UDP"}]}
    if exposed_to:
        service_spec |= {"type": "LoadBalancer", "loadBalancerSourceRanges": list(exposed_to),
                         "externalTrafficPolicy": "Local"}
        peers: list[dict] = [{"ipBlock": {"cidr": cidr}} for cidr in exposed_to]
    else:
        service_spec["type"] = "ClusterIP"
        peers = [{"podSelector": {"matchLabels": {f"{LABEL}/name": "tailrace", f"{LABEL}/component": "worker"}}}]
    return [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "tailrace-results"} | meta,
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": res.results_storage}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tailrace-master"} | meta,
         "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": _labels("master")},
                                                   "spec": _pod_spec(container, volumes)}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tailrace-master"} | meta, "spec": service_spec},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "tailrace-master-ingress"} | meta,
         "spec": {"podSelector": {"matchLabels": _labels("master")}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": MASTER_PORT},
                                                        {"protocol": "UDP", "port": SNTP_PORT}]}]}},
    ]


def worker_doc(profile: Profile, region, image: str, namespace: str, res: Resources, master: str,
               data_included: bool, data: dict[str, Path]) -> dict:
    """One region's worker Job: `workers` pods, indexed, on the region's nodes."""
    volumes, mounts = _volumes(data, data_included, endpoint_files(profile))
    volumes.append({"name": "spool", "emptyDir": {}})
    mounts.append({"name": "spool", "mountPath": SPOOL})
    index_env = {"name": "TAILRACE_WORKER_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
    container = {"name": "worker", "image": image, "imagePullPolicy": "IfNotPresent",
                 "args": worker_args(master=master, region=region.name, index="$(TAILRACE_WORKER_INDEX)", spool=SPOOL),
                 "env": [index_env, *_env(profile)],
                 "resources": _resources(res.worker_cpus, res.worker_memory), "volumeMounts": mounts}
    selector = region.node_selector or {"topology.kubernetes.io/region": region.name}
    spec = _pod_spec(container, volumes, selector)
    spec["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": _labels("worker", region.name)}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"tailrace-worker-{_dns(region.name)}", "namespace": namespace,
                         "labels": _labels("worker", region.name)},
            "spec": {"completionMode": "Indexed", "completions": region.workers, "parallelism": region.workers,
                     "backoffLimit": 0,
                     # a worker whose master went silent (exit 6) stopped with its results spooled: never retried
                     "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                         "containerName": "worker", "operator": "In", "values": [WORKER_MASTER_LOST]}}]},
                     "template": {"metadata": {"labels": _labels("worker", region.name)}, "spec": spec}}}


def reader_doc(image: str, namespace: str) -> dict:
    """A Pod that mounts the results volume read-only, to `kubectl cp` the run directory out after the run."""
    container = {"name": "reader", "image": image, "command": ["python", "-c", "import time; time.sleep(86400)"],
                 "resources": _resources(1, "256Mi"),
                 "volumeMounts": [{"name": "results", "mountPath": RESULTS, "readOnly": True}]}
    spec = _pod_spec(container, [{"name": "results", "persistentVolumeClaim": {"claimName": "tailrace-results",
                                                                                "readOnly": True}}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tailrace-results", "namespace": namespace,
                                                            "labels": _labels("results")}, "spec": spec}


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")[:40]


def _namespace(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
        f"{LABEL}/name": "tailrace", "pod-security.kubernetes.io/enforce": "restricted"}}}


def render(profile: Profile, profile_path: Path, image: str, *, namespace: str = NAMESPACE,
           per_cluster: bool = False, master_cluster: str | None = None, master_address: str | None = None,
           worker_source_ranges: Sequence[str] = (), resources: Resources = Resources(), wait_s: float = 600.0
           ) -> dict[str, dict[str, list[dict]]]:
    """cluster → file name → documents. One cluster ("") unless `per_cluster`."""
    for i, e in enumerate(profile.endpoints):
        if e.url in ("embedded", "triton"):
            raise DeployError(f"endpoints[{i}].url: {e.url!r} is a server `tailrace run` starts on one machine; a "
                              "deployment sends to the endpoint's own URL (http://, grpc://)")
    profile_text = profile_path.read_text()
    data = data_files(profile, profile_path)
    service = f"tailrace-master.{namespace}.svc.cluster.local:{MASTER_PORT}"
    if not per_cluster:
        configmaps, included = _configmaps(profile_text, data, namespace)
        files = {"00-namespace.yaml": [_namespace(namespace)], "10-profile.yaml": configmaps,
                 "20-master.yaml": master_docs(profile, image, namespace, resources, included, data, None, wait_s)}
        for region in profile.regions:
            files[f"30-workers-{_dns(region.name)}.yaml"] = [worker_doc(profile, region, image, namespace, resources,
                                                                         service, included, data)]
        files["90-results-reader.yaml"] = [reader_doc(image, namespace)]
        return {"": files}
    clusters: dict[str, list] = {}
    for region in profile.regions:
        clusters.setdefault(region.cluster or region.name, []).append(region)
    master_cluster = master_cluster or next(iter(clusters))
    remote = [c for c in clusters if c != master_cluster]
    if remote and not master_address:
        raise DeployError("--master-address: the workers in other clusters need the address of the master's "
                          "LoadBalancer (HOST or HOST:PORT; render and apply the master's cluster first to learn it)")
    if remote and not worker_source_ranges:
        raise DeployError("--worker-source-range: the master's LoadBalancer must admit only the workers' egress "
                          "addresses (CIDR, repeatable), never the whole internet")
    address = (master_address or "") if not master_address or ":" in master_address else \
        f"{master_address}:{MASTER_PORT}"
    out: dict[str, dict[str, list[dict]]] = {}
    for cluster in [master_cluster, *remote]:
        configmaps, included = _configmaps(profile_text, data, namespace)
        files = {"00-namespace.yaml": [_namespace(namespace)], "10-profile.yaml": configmaps}
        if cluster == master_cluster:
            files["20-master.yaml"] = master_docs(profile, image, namespace, resources, included, data,
                                                  list(worker_source_ranges) if remote else None, wait_s)
            files["90-results-reader.yaml"] = [reader_doc(image, namespace)]
        for region in clusters.get(cluster, []):
            files[f"30-workers-{_dns(region.name)}.yaml"] = [worker_doc(
                profile, region, image, namespace, resources, service if cluster == master_cluster else address,
                included, data)]
        out[cluster] = files
    return out


def warnings(profile: Profile) -> list[str]:
    """What the user should know about a rendered deployment."""
    if profile.clock.servers != ["master"]:
        return [f"clock.servers is {profile.clock.servers}: every worker must reach those NTP servers; "
                "['master'] makes the master their reference"]
    return []


def write(rendered: dict[str, dict[str, list[dict]]], out: Path) -> list[Path]:
    """Write every file (YAML, documents separated by ---); returns the paths."""
    import yaml

    written = []
    for cluster, files in rendered.items():
        directory = out / cluster if cluster else out
        directory.mkdir(parents=True, exist_ok=True)
        for name, docs in files.items():
            path = directory / name
            path.write_text("---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs))
            written.append(path)
    return written
