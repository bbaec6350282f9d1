"""The transport check a multi-node group's leader runs at start: which network NCCL chose.

The leader's engine writes NCCL's INFO log (NCCL_DEBUG=INFO, components/serving.py EFA_ENV) to a
file on a pod-local volume (NCCL_DEBUG_FILE; `%h` and `%p` are the host name and pid, NCCL's
environment documentation), and a small sidecar, `nccl-transport`, reads the first "Using network
<name>" line NCCL prints when a communicator starts (NVIDIA/nccl src/init.cc:
`INFO(NCCL_INIT, "Using network %s", ...)`, in NCCL's default INIT subsystem). aws-ofi-nccl's plugin
is named "Libfabric" (aws/aws-ofi-nccl `ncclNetPlugin_v*` `.name = "Libfabric"`; NCCL reports
"AWS Libfabric" where the plugin renames itself for NCCL's tuner); NCCL's own TCP transport is
"Socket". The sidecar logs the name once and writes it as `llm_serving_nccl_network{network=...} 1`,
which the leader's metrics proxy serves at NCCL_METRICS_PATH and Prometheus scrapes
(components/monitoring.py); `LLMServingGroupWithoutEfa` (observability/rules.py) fires on any name
but Libfabric.

The name is taken from NCCL's log, so only letters and spaces are kept (it becomes a label value).
Pure data, no Pulumi.
"""
from __future__ import annotations

NCCL_LOG_DIR = "/var/run/nccl"
NCCL_DEBUG_FILE = f"{NCCL_LOG_DIR}/nccl.%h.%p.log"
NCCL_METRICS_FILE = f"{NCCL_LOG_DIR}/metrics.prom"
NCCL_METRICS_PATH = "/nccl-metrics"
NCCL_VOLUME = {"name": "nccl-log", "emptyDir": {"sizeLimit": "64Mi"}}

# POSIX sh (the metrics proxy's Alpine image runs it): no value from the stack in it.
CHECK_SCRIPT = """\
set -u
while :; do
  net=$(cat "$LOG_DIR"/nccl.*.log 2>/dev/null | grep -o 'NCCL INFO Using network [A-Za-z ]*' | head -n 1 \\
        | sed -e 's/.*Using network //' -e 's/ *$//')
  if [ -n "$net" ]; then
    echo "nccl-transport: NCCL chose the network '$net' (Libfabric: EFA through aws-ofi-nccl; Socket: TCP)"
    printf '# HELP llm_serving_nccl_network The network NCCL chose at start.\\n# TYPE llm_serving_nccl_network gauge\\nllm_serving_nccl_network{network="%s"} 1\\n' "$net" > "$LOG_DIR/metrics.prom.tmp"
    mv "$LOG_DIR/metrics.prom.tmp" "$LOG_DIR/metrics.prom"
    exec sleep 2147483647
  fi
  sleep 1
done
"""


def check_container(image: str, security_context: dict, scratch_mount: dict) -> dict:
    return {
        "name": "nccl-transport", "image": image, "command": ["/bin/sh", "-c", CHECK_SCRIPT],
        "env": [{"name": "LOG_DIR", "value": NCCL_LOG_DIR}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": security_context,
        "volumeMounts": [{"name": NCCL_VOLUME["name"], "mountPath": NCCL_LOG_DIR}, scratch_mount],
    }
