"""The FP8 accuracy gate: the verdict against the BF16 baseline, and the awaited Job that makes a
failed gate fail `pulumi up`, on by default in staging and prod."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from conventions import PYTHON_IMAGE
from deployment import accuracy_check, gate_runner
from components.accuracy_gate import LM_EVAL, REQUIREMENTS, TRANSFORMERS
from deployment.api_keys import gate_key
from deployment.gateway import gate_rate_limit
from deployment.jobs import GATE_TIMEOUT_S, GateJob, gate_spec, rollout_digest
from offline.engine import unwrap
from offline.manifests import kubernetes_objects
from tests.k8s_schema import validate
from settings import SettingsError, settings_from_config
from sizing.planner import plan as make_plan
from tests.stacks import stack_config

JOB = "kubernetes:batch/v1:Job"
GATE = {"max_drop": 0.01, "tasks": {"gsm8k": {"metric": "exact_match,strict-match", "baseline": 0.93},
                                    "mmlu_pro": {"metric": "exact_match,custom-extract", "baseline": 0.69}}}

def lm_eval_results(gsm8k: float | None, mmlu_pro: float) -> dict:
    """The shape lm-eval 0.4 writes: results.<task>.<metric>,<filter> (and its _stderr twin)."""
    results = {"mmlu_pro": {"exact_match,custom-extract": mmlu_pro, "exact_match_stderr,custom-extract": 0.004}}
    if gsm8k is not None:
        results["gsm8k"] = {"exact_match,strict-match": gsm8k, "exact_match_stderr,strict-match": 0.007}
    return {"results": results}


# -- the verdict --------------------------------------------------------------------------------------
@pytest.mark.parametrize("gsm8k, mmlu_pro, passed, lines", [
    (0.925, 0.69, True, [
        "PASS gsm8k: exact_match,strict-match 0.9250 +/- 0.0070, BF16 baseline 0.9300, drop +0.0050 (allowed 0.0100)",
        "PASS mmlu_pro: exact_match,custom-extract 0.6900 +/- 0.0040, BF16 baseline 0.6900, drop +0.0000 "
        "(allowed 0.0100)"]),
    (0.92, 0.70, True, [
        "PASS gsm8k: exact_match,strict-match 0.9200 +/- 0.0070, BF16 baseline 0.9300, drop +0.0100 (allowed 0.0100)",
        "PASS mmlu_pro: exact_match,custom-extract 0.7000 +/- 0.0040, BF16 baseline 0.6900, drop -0.0100 "
        "(allowed 0.0100)"]),
    (0.91, 0.69, False, [
        "FAIL gsm8k: exact_match,strict-match 0.9100 +/- 0.0070, BF16 baseline 0.9300, drop +0.0200 (allowed 0.0100)",
        "PASS mmlu_pro: exact_match,custom-extract 0.6900 +/- 0.0040, BF16 baseline 0.6900, drop +0.0000 "
        "(allowed 0.0100)"]),
    (None, 0.69, False, [
        "FAIL gsm8k: no 'exact_match,strict-match' score in the results",
        "PASS mmlu_pro: exact_match,custom-extract 0.6900 +/- 0.0040, BF16 baseline 0.6900, drop +0.0000 "
        "(allowed 0.0100)"]),
], ids=["within", "exactly-at-the-margin", "beyond", "missing"])
def test_a_task_fails_when_it_drops_more_than_the_margin_below_bf16(gsm8k, mmlu_pro, passed, lines):
    assert accuracy_check.judge(lm_eval_results(gsm8k, mmlu_pro), GATE) == (passed, lines)


@pytest.mark.parametrize("gsm8k, code", [(0.93, 0), (0.90, 1)])
def test_the_script_reads_the_newest_results_and_exits_with_the_verdict(tmp_path, capsys, gsm8k, code):
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps(GATE))
    out = tmp_path / "results" / "llama-3-70b"
    out.mkdir(parents=True)
    old = out / "results_2026-01-01T00-00-00.json"
    old.write_text(json.dumps(lm_eval_results(0.5, 0.5)))
    new = out / "results_2026-01-02T00-00-00.json"
    new.write_text(json.dumps(lm_eval_results(gsm8k, 0.69)))
    os.utime(old, (1, 1))                 # older on disk too: the newest file wins
    assert accuracy_check.main(["accuracy_check.py", str(gate), str(tmp_path / "results")]) == code
    assert capsys.readouterr().out.splitlines()[0] == ("FP8 accuracy gate: passed" if code == 0
                                                        else "FP8 accuracy gate: FAILED")


def test_no_results_at_all_fails_the_gate(tmp_path, capsys):
    gate = tmp_path / "gate.json"
    gate.write_text(json.dumps(GATE))
    assert accuracy_check.main(["accuracy_check.py", str(gate), str(tmp_path)]) == 1
    assert f"FAIL no lm-eval results_*.json under {tmp_path}" in capsys.readouterr().out


# -- the settings it reads ---------------------------------------------------------------------------
def settings_for(stack: str, overrides: dict | None = None):
    raw = stack_config(stack)
    for key, value in (overrides or {}).items():
        raw[f"llm-serving:{key}"] = value
    return settings_from_config(stack, raw)


def test_every_task_needs_a_baseline():
    with pytest.raises(SettingsError) as exc:
        settings_for("prod", {"accuracyGate": {"tasks": ["gsm8k", "mmlu_pro"], "baseline": {"gsm8k": 0.93}}})
    assert "tasks mmlu_pro have no BF16 baseline; add them to baseline" in str(exc.value)


def test_a_task_without_a_known_metric_is_refused_by_the_settings():
    with pytest.raises(SettingsError) as exc:
        settings_for("prod", {"accuracyGate": {"tasks": ["hellaswag"], "baseline": {"hellaswag": 0.85}}})
    assert exc.value.problems == ["llm-serving:accuracyGate.tasks: no known metric for hellaswag; "
                                  "supported: gsm8k, gsm8k_cot, mmlu_pro"]


def test_the_gate_judges_the_configured_tasks_baselines_and_margin():
    settings = settings_for("prod", {"accuracyGate": {"tasks": ["gsm8k"], "baseline": {"gsm8k": 0.9}, "maxDrop": 0.02}})
    assert gate_spec(settings.accuracyGate) == {"max_drop": 0.02,
                                   "tasks": {"gsm8k": {"metric": "exact_match,strict-match", "baseline": 0.9}}}


@pytest.mark.parametrize("overrides", [
    {"workload": {"qps": 6, "inputTokens": 2000, "outputTokens": 300, "maxModelLen": 8192, "ttftSeconds": 1.0,
                  "tpotSeconds": 0.040}},
    {"accuracyGate": {"baseline": {"gsm8k": 0.94, "mmlu_pro": 0.69}}},
    {"model": {"id": "llama-3-70b", "weights": "fp8", "kvCacheDtype": "fp8"}},
])
def test_a_new_rollout_or_new_thresholds_run_the_gate_again(overrides):
    base = settings_for("prod")
    changed = settings_for("prod", overrides)
    base_plan, changed_plan = make_plan(base.plan_request()), make_plan(changed.plan_request())
    assert rollout_digest(base_plan, GateJob.for_stack(base_plan, base)) != \
        rollout_digest(changed_plan, GateJob.for_stack(changed_plan, changed))


# -- the Job in the program ------------------------------------------------------------------------------
def gate_resources(recording) -> dict:
    return {r.type: r for r in recording.resources if r.name.startswith("accuracy-gate")}


@pytest.mark.parametrize("stack, overrides, present", [
    ("prod", None, True),
    ("staging", None, True),
    ("dev", None, False),
    # dev's 8B serves 8,192 tokens at most: the gate's mmlu_pro (7,048) fits only when stated
    ("dev", {"accuracyGate": {"enabled": True},
             "workload": {"qps": 2, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": 8192}}, True),
    ("prod", {"accuracyGate": {"enabled": False}}, False),
])
def test_on_by_default_in_staging_and_prod(recorded, stack, overrides, present):
    assert bool(gate_resources(recorded(stack, overrides))) is present


def test_the_job_is_awaited_and_fails_on_the_first_failed_check(recorded):
    job = gate_resources(recorded("prod"))[JOB].inputs
    annotations = job["metadata"].get("annotations", {})
    assert "pulumi.com/skipAwait" not in annotations
    assert annotations["pulumi.com/replaceUnready"] == "true"
    assert job["spec"]["backoffLimit"] == 0
    # Long enough for every question at the gate's own quota, never under GATE_TIMEOUT_S.
    settings = settings_for("prod")
    plan = make_plan(settings.plan_request())
    limit = gate_rate_limit(plan, settings.gateway.rateLimitShare, 2)
    questions = 1319 + 12032                       # gsm8k and mmlu_pro test splits
    gate_qps = limit.requests * 2 / limit.unit_s   # its buckets on both proxies
    assert job["spec"]["activeDeadlineSeconds"] >= max(GATE_TIMEOUT_S, questions / gate_qps)


def test_the_job_runs_after_the_serving_rollout_and_the_gateway(recorded):
    rec = recorded("prod")
    job = gate_resources(rec)[JOB]
    deployments = [r.urn for r in rec.of_type("kubernetes:apps/v1:Deployment")
                   if r.inputs["metadata"].get("labels", {}).get("llm-serving.io/role") == "serving"]
    route = [r.urn for r in rec.resources if r.name == "llm-gateway-route"]
    assert deployments and route and set(deployments + route) <= set(job.dependencies)


def test_the_job_runs_pinned_lm_eval_and_ships_the_tested_check(recorded):
    res = gate_resources(recorded("prod"))
    pod = res[JOB].inputs["spec"]["template"]["spec"]
    container, (install,) = pod["containers"][0], pod["initContainers"]
    assert container["image"] == PYTHON_IMAGE and ":" in PYTHON_IMAGE and "latest" not in PYTHON_IMAGE
    assert "==" in LM_EVAL
    data = res["kubernetes:core/v1:ConfigMap"].inputs["data"]
    assert data["accuracy_check.py"] == Path(accuracy_check.__file__).read_text()
    assert json.loads(data["gate.json"]) == gate_spec(settings_for("prod").accuracyGate)
    # The install runs in the init container, which sees no secret; the gate installs nothing.
    assert install["command"][:3] == ["pip", "install", "--no-cache-dir"] and "--require-hashes" in install["command"]
    requirements = data[install["command"][-1].removeprefix("/gate/")].splitlines()
    assert LM_EVAL.replace("-", "_").replace("[api]", "") in {r.split(" ")[0] for r in requirements}
    assert all(" --hash=sha256:" in r for r in requirements if not r.startswith("#"))
    assert "valueFrom" not in json.dumps(install)
    # No shell: the runner (the tested file) reads every value from gate-run.json.
    assert container["command"] == ["python", "/gate/gate_runner.py", "/gate/gate-run.json"]
    assert data["gate_runner.py"] == Path(gate_runner.__file__).read_text()
    run = json.loads(data["gate-run.json"])
    assert run["gateway_url"] == "https://llm.example.com" and run["key_file"] == "/var/run/secrets/accuracy-gate/api-key"
    assert not any("pip" in a for a in run["lm_eval"])
    model_args = dict(a.split("=", 1) for a in run["lm_eval"][run["lm_eval"].index("--model_args") + 1].split(","))
    assert model_args["base_url"] == "https://llm.example.com/v1/completions"
    # The key is a mounted file, read into lm_eval's own environment only (not the pod spec's).
    assert "OPENAI_API_KEY" not in json.dumps(container["env"])
    # The served model's tokenizer and context: lm-eval truncates an over-long context instead of a 400.
    assert f"{TRANSFORMERS} --hash=sha256:" in REQUIREMENTS.read_text()
    assert {k: model_args[k] for k in ("tokenized_requests", "tokenizer_backend", "tokenizer", "max_length")} == {
        "tokenized_requests": "True", "tokenizer_backend": "huggingface",
        "tokenizer": "nvidia/Llama-3.3-70B-Instruct-FP8", "max_length": "8192"}
    assert run["tokenizer"] == model_args["tokenizer"]
    # A gated tokenizer is read with the stack's hub token, a file for huggingface_hub's HF_TOKEN_PATH.
    assert {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/hub/token"} in container["env"]
    assert {"name": "hub-token", "mountPath": "/var/run/secrets/hub", "readOnly": True} in container["volumeMounts"]


def test_the_lm_eval_arguments_take_the_pinned_truncation_path(recorded, upstream_file):
    """Against lm-eval 0.4.13's own source (the wheel's lm_eval/models/api_models.py): every
    --model_args key is a TemplateAPI parameter, and the left-truncation of generate_until's contexts
    to max_length - max_gen_toks runs only under `if self.tokenized_requests:`, which the gate sets."""
    import ast
    tree = ast.parse(upstream_file("lm-eval-0.4.13/api_models.py").read_text())
    api = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TemplateAPI")
    init = next(n for n in api.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    parameters = {a.arg for a in init.args.args + init.args.kwonlyargs}
    truncations = [node for node in ast.walk(api) if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "self.tokenized_requests"
                   and "max_context_len = self.max_length - max_gen_toks" in ast.unparse(node)]
    assert len(truncations) == 2          # generate_until: the sequential and the concurrent path
    run = json.loads(gate_resources(recorded("prod"))["kubernetes:core/v1:ConfigMap"].inputs["data"]["gate-run.json"])
    args = run["lm_eval"]
    model_args = dict(a.split("=", 1) for a in args[args.index("--model_args") + 1].split(","))
    assert set(model_args) <= parameters, sorted(set(model_args) - parameters)
    assert model_args["tokenized_requests"] == "True" and model_args["tokenizer_backend"] == "huggingface"


def fake_transformers(tmp_path, cause: str | None) -> Path:
    """A stand-in `transformers` whose AutoTokenizer raises as transformers 5.24.0 does (an OSError
    whose __cause__ is huggingface_hub's error), or loads."""
    pkg = tmp_path / "py" / "transformers"
    pkg.mkdir(parents=True)
    raise_it = (f"        class {cause}(Exception): pass\n"
                f"        raise OSError('secret-bearing hub message') from {cause}()\n") if cause else "        return object()\n"
    (pkg / "__init__.py").write_text("class AutoTokenizer:\n    @staticmethod\n    def from_pretrained(name):\n" + raise_it)
    return tmp_path / "py"


@pytest.mark.parametrize("cause, problem", [
    (None, None),
    ("GatedRepoError", "the tokenizer org/tok is in a gated hub repository the gate cannot read: set hubToken "
                       "(`pulumi config set --secret hubToken <token>`) to a token with access to it, then `pulumi up`"),
    ("RepositoryNotFoundError", "the tokenizer org/tok is in a private or missing hub repository the gate cannot "
                                "read: set hubToken (`pulumi config set --secret hubToken <token>`) to a token with "
                                "access to it, then `pulumi up`"),
    ("ConnectionError", "the tokenizer org/tok cannot be loaded (OSError <- ConnectionError)"),
], ids=["loads", "gated", "private", "other"])
def test_a_tokenizer_the_gate_cannot_read_is_named_never_quoted(tmp_path, monkeypatch, cause, problem):
    import sys
    monkeypatch.syspath_prepend(str(fake_transformers(tmp_path, cause)))
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    assert gate_runner.tokenizer_problem("org/tok") == problem


def test_the_runner_stops_with_2_when_the_gateway_never_answers(tmp_path, capsys, monkeypatch):
    import socket
    with socket.socket() as s:             # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "key").write_text("k\n")
    run = {"gateway_url": f"http://127.0.0.1:{port}", "ready_wait_s": 0, "key_file": str(tmp_path / "key"),
           "work": str(tmp_path), "tokenizer": "org/tok", "lm_eval": ["false"], "check": ["false"]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    monkeypatch.setattr(gate_runner, "TERMINATION_LOG", str(tmp_path / "termination-log"))
    assert gate_runner.main(["gate_runner.py", str(tmp_path / "run.json")]) == 2
    assert capsys.readouterr().out == f"gateway not ready at http://127.0.0.1:{port}/v1/models after 0 s (URLError)\n"
    assert (tmp_path / "termination-log").read_text().startswith("gateway not ready")


@pytest.mark.parametrize("value", ["x'; rm -rf /", "a,base_url=https://evil", "$(id)", "a\nb", "a b", "--trust-remote-code",
                                   "caf\u00e9", "\u0130d", "", "m" * 129])   # é and İ stay non-ASCII after NFKC
def test_a_served_name_that_would_reach_a_command_line_is_refused_naming_the_key(tmp_path, value):
    """model.id beside model.config is the served name vLLM, GuideLLM and lm-eval's --model_args get."""
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", _config_model_stack(tmp_path, value))
    assert any(p.startswith("llm-serving:model.id: ") and "is not a model name clients can ask for" in p
               for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("value,served", [("\u212aimi", "Kimi"), ("\uff2clama-\uff18b", "Llama-8b")])
def test_a_unicode_served_name_is_served_as_nfkc_writes_it(tmp_path, value, served):
    """A Kelvin sign (U+212A) or fullwidth letters fold into the ASCII letters they stand for: one
    name, one spelling, at vLLM, the gateway and the gate."""
    assert settings_from_config("prod", _config_model_stack(tmp_path, value)).model.id == served


def _config_model_stack(tmp_path, model_id: str) -> dict:
    config = tmp_path / "m" / "config.json"
    config.parent.mkdir()
    config.write_text((Path(__file__).parent.parent / "sizing/data/models/llama-3.1-8b.json").read_text())
    return {**stack_config("prod"), "llm-serving:model": {"config": str(config), "id": model_id, "weights": "bf16",
                                                          "checkpoint": "meta-llama/Llama-3.1-8B-Instruct"}}


def test_the_key_reaches_kubernetes_only_as_a_secret(recorded):
    res = gate_resources(recorded("prod"))
    string_data = res["kubernetes:core/v1:Secret"].inputs["stringData"]
    # The gate's own key (derived from the apiKeys secret), not a tenant's.
    api_keys = json.dumps({"team-a": "offline-preview-secret-apiKeys-team-a",
                           "team-b": "offline-preview-secret-apiKeys-team-b"})
    assert unwrap(string_data)["api-key"] == gate_key(api_keys)
    assert unwrap(string_data)["api-key"] not in api_keys
    assert "offline-preview-secret" not in json.dumps(res[JOB].inputs)
    assert "offline-preview-secret" not in json.dumps(res["kubernetes:core/v1:ConfigMap"].inputs)


def test_the_rendered_objects_are_valid_kubernetes(recorded):
    res = gate_resources(recorded("prod"))
    objects = kubernetes_objects(SimpleNamespace(resources=[r for t, r in res.items() if t.startswith("kubernetes:")]))
    assert len(objects) == 4        # Secret, ConfigMap, egress NetworkPolicy, Job
    for obj in objects:
        validate(obj, "1.33")


@pytest.mark.parametrize("max_model_len, tasks, problems", [
    (8192, ["gsm8k", "mmlu_pro"], []),
    (4096, ["gsm8k"], []),
    (4096, ["gsm8k", "mmlu_pro"], [
        "llm-serving:accuracyGate.tasks: mmlu_pro asks for 2,048 generated tokens after prompts of up to 5,000 "
        "(7,048 in all, lm-eval 0.4.13), above the served max_model_len of 4,096; raise workload.maxModelLen to at "
        "least 7,048 or drop the task"]),
    (1300, ["gsm8k"], [
        "llm-serving:accuracyGate.tasks: gsm8k asks for 256 generated tokens after prompts of up to 1,500 "
        "(1,756 in all, lm-eval 0.4.13), above the served max_model_len of 1,300; raise workload.maxModelLen to at "
        "least 1,756 or drop the task"]),
])
def test_a_gate_task_must_fit_the_served_context(max_model_len, tasks, problems):
    """lm-eval 0.4.13's generated tokens plus the task's longest few-shot prompt fit max_model_len, or the
    settings refuse the task, naming both numbers (vLLM would refuse its requests with a 400)."""
    from settings.load import SettingsError
    overrides = {"workload": {"qps": 10, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": max_model_len},
                 "accuracyGate": {"tasks": tasks, "baseline": {t: 0.5 for t in tasks}}}
    if problems:
        with pytest.raises(SettingsError) as exc:
            settings_for("prod", overrides)
        assert [p for p in exc.value.problems if "accuracyGate" in p] == problems
    else:
        assert settings_for("prod", overrides).accuracyGate.tasks == tuple(tasks)
