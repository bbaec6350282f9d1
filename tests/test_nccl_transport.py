"""The multi-node leaders' NCCL transport check: the leader logs and exports which network NCCL chose,
Prometheus scrapes it, and an alert fires when a group runs without EFA (under promtool)."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import yaml

from deployment.nccl_transport import CHECK_SCRIPT
from offline.manifests import kubernetes_objects
from tests.test_pod_security import pods


def test_the_leader_runs_the_check_and_serves_its_result(recorded):
    objects = kubernetes_objects(recorded("prod-multinode"))
    specs = dict(pods(objects))
    leaders = {n: s for n, s in specs.items() if n.endswith("/leader")}
    workers = {n: s for n, s in specs.items() if n.endswith("/worker")}
    assert leaders and workers
    for name, spec in leaders.items():
        containers = {c["name"]: c for c in spec["containers"]}
        env = {e["name"]: e.get("value") for e in containers["vllm"]["env"]}
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == "/var/run/nccl/nccl.%h.%p.log", name
        assert containers["nccl-transport"]["command"] == ["/bin/sh", "-c", CHECK_SCRIPT], name
        assert {"name": "nccl-log", "mountPath": "/var/run/nccl", "readOnly": True} in \
            containers["metrics-proxy"]["volumeMounts"], name
    for name, spec in workers.items():      # a worker's NCCL log stays on its standard error
        assert [c["name"] for c in spec["containers"]] == ["vllm"], name
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor" and "nccl-transport" in o["metadata"]["name"]]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/nccl-metrics" and endpoint["portNumber"] == 9400
    (conf,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "vllm-metrics-proxy"]
    assert "location = /nccl-metrics { default_type text/plain; alias /var/run/nccl/metrics.prom; }" in \
        conf["data"]["default.conf"]


def test_a_single_node_stack_runs_no_check(recorded):
    objects = kubernetes_objects(recorded("prod"))
    assert not [o for o in objects if o["kind"] == "PodMonitor" and "nccl-transport" in o["metadata"]["name"]]


def _run_check(tmp_path, log_text: str) -> tuple[str, str]:
    (tmp_path / "nccl.host-1.42.log").write_text(log_text)
    proc = subprocess.Popen(["/bin/sh", "-c", CHECK_SCRIPT], env={"LOG_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if (tmp_path / "metrics.prom").exists():
                break
            time.sleep(0.05)
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=5)
    return out, (tmp_path / "metrics.prom").read_text()


@pytest.mark.parametrize("line, network", [
    ("host-1:42:42 [0] NCCL INFO Using network Libfabric", "Libfabric"),
    ("host-1:42:42 [0] NCCL INFO Using network AWS Libfabric", "AWS Libfabric"),
    ("host-1:42:42 [0] NCCL INFO Using network Socket", "Socket"),
    # only letters and spaces reach the label: a line cannot forge another series
    ('host-1:42:42 [0] NCCL INFO Using network So"} 1\nx{a="', "So"),
])
def test_the_check_logs_and_exports_the_network_nccl_chose(tmp_path, line, network):
    log = f"host-1:42:42 [0] NCCL INFO NET/Plugin: Loaded net plugin\n{line}\nNCCL INFO Using network Other\n"
    out, metrics = _run_check(tmp_path, log)
    assert f"NCCL chose the network '{network}'" in out
    assert metrics.splitlines()[-1] == f'llm_serving_nccl_network{{network="{network}"}} 1'


def test_the_check_waits_until_nccl_has_started(tmp_path):
    proc = subprocess.Popen(["/bin/sh", "-c", CHECK_SCRIPT], env={"LOG_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.PIPE, text=True)
    time.sleep(1.2)
    assert not (tmp_path / "metrics.prom").exists() and proc.poll() is None
    proc.kill()
    proc.communicate(timeout=5)


@pytest.mark.promtool
def test_the_alert_fires_for_a_group_without_efa_and_not_with_it(tmp_path):
    """Socket fires at once (the plan's link cost is wrong from the first request); Libfabric and AWS
    Libfabric stay silent; a single-node plan has no such alert."""
    from observability.rules import alert_names, render_rule_file, rule_groups
    from tests.stacks import stack_config
    from settings import settings_from_config
    from sizing.planner import plan as make_plan
    multi = make_plan(settings_from_config("prod-multinode", stack_config("prod-multinode")).plan_request())
    single = make_plan(settings_from_config("prod", stack_config("prod")).plan_request())
    assert "LLMServingGroupWithoutEfa" in alert_names(rule_groups(multi, "llm-serving"))
    assert "LLMServingGroupWithoutEfa" not in alert_names(rule_groups(single, "llm-serving"))
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rule_file(rule_groups(multi, "llm-serving")))
    series = [{"series": f'llm_serving_nccl_network{{job="nccl-transport",namespace="llm-serving",pod="{pod}",'
                         f'network="{net}"}}', "values": "1x10"}
              for pod, net in (("a-0", "Socket"), ("b-0", "Libfabric"), ("c-0", "AWS Libfabric"))]
    suite = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [{"eval_time": "2m", "alertname": "LLMServingGroupWithoutEfa", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "namespace": "llm-serving", "pod": "a-0"},
            "exp_annotations": yaml.safe_load(rules.read_text())["groups"][-1]["rules"][0]["annotations"]}]}]}]}
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(suite, sort_keys=False))
    result = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", str(test_file)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
