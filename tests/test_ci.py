"""The PR checks as a real GitHub runner runs them: upstream files fetched by one script (pinned URL
and SHA-256, a mirror when offline), and a hardened workflow."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, upstream_path

FETCH = ROOT / "scripts" / "fetch-upstream"
MANIFEST = json.loads((ROOT / "scripts" / "upstream-files.json").read_text())["files"]
WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def fetch(cache, *args, mirror: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLM_SERVING_UPSTREAM": str(cache), "LLM_SERVING_MIRROR": mirror or ""}
    return subprocess.run([sys.executable, str(FETCH), *args], capture_output=True, text=True, env=env, timeout=120)


# -- the manifest and the fetch script -------------------------------------------------------
@pytest.mark.parametrize("entry", MANIFEST, ids=[e["path"] for e in MANIFEST])
def test_every_upstream_file_is_pinned_to_a_commit_and_a_checksum(entry):
    """A file of a repository at a commit, or a member of a published wheel: PyPI's file URLs name the
    file's BLAKE2b-256, so they cannot change either, and the wheel's SHA-256 is pinned beside the member's."""
    if entry.get("member"):
        assert re.fullmatch(r"https://files\.pythonhosted\.org/packages/[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{60}/"
                            r"[\w.-]+\.whl", entry["url"])
        assert re.fullmatch(r"[0-9a-f]{64}", entry["archive_sha256"])
    else:
        assert re.fullmatch(r"https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+", entry["url"])
    assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])


def test_a_clone_without_shared_fetches_from_a_mirror_and_checks_each_file(tmp_path):
    mirror = tmp_path / "mirror"
    for entry in MANIFEST:
        if entry.get("required", True):
            target = mirror / entry["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(upstream_path(entry["path"]), target)
    result = fetch(tmp_path / "cache", "--offline", mirror=str(mirror))
    assert result.returncode == 0, result.stderr
    for entry in MANIFEST:
        if entry.get("required", True):
            assert hashlib.sha256((tmp_path / "cache" / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]


VENDORED = ROOT / "vendor" / "upstream"


def test_a_mirror_copy_with_the_wrong_checksum_is_refused(tmp_path):
    entry = next(e for e in MANIFEST if e.get("required", True) and not (VENDORED / e["path"]).exists())
    target = tmp_path / "mirror" / entry["path"]
    target.parent.mkdir(parents=True)
    target.write_text("edited\n")
    result = fetch(tmp_path / "cache", "--offline", mirror=str(tmp_path / "mirror"))
    assert result.returncode == 1
    assert f"fetch-upstream: {entry['path']}: not in any mirror (offline); source {entry['url']}" \
        in result.stderr.splitlines()
    assert not (tmp_path / "cache" / entry["path"]).exists()


def test_a_missing_upstream_file_fails_the_test_in_one_line_naming_the_script(tmp_path, monkeypatch):
    import tests.conftest as conftest
    monkeypatch.setattr(conftest, "UPSTREAM", tmp_path)
    with pytest.raises(pytest.fail.Exception) as exc:
        conftest.upstream_path("samples/nothing.txt")
    assert str(exc.value) == f"{tmp_path / 'samples' / 'nothing.txt'} missing: run scripts/fetch-upstream"


@pytest.mark.parametrize("path", sorted(p.relative_to(VENDORED).as_posix() for p in VENDORED.rglob("*") if p.is_file()))
def test_every_vendored_file_is_pinned_and_unedited(path):
    """vendor/upstream holds only files of the manifest, byte for byte what its URL at a commit serves."""
    entry = next(e for e in MANIFEST if e["path"] == path)
    assert hashlib.sha256((VENDORED / path).read_bytes()).hexdigest() == entry["sha256"]
    assert re.search(r"/[0-9a-f]{40}/", entry["url"]) or re.search(r"/[0-9a-f]{60}/[\w.-]+\.whl$", entry["url"])


def test_a_failed_fetch_names_the_mirror_variable(tmp_path):
    result = fetch(tmp_path / "cache", "--offline", mirror=str(tmp_path / "empty"))
    assert result.returncode == 1
    assert any("LLM_SERVING_MIRROR" in line for line in result.stderr.splitlines())


def test_the_cache_is_never_committed():
    assert "/.upstream/" in (ROOT / ".gitignore").read_text().splitlines()


def test_ci_fetches_before_it_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("scripts/fetch-upstream") < ci.index("scripts/test")
    steps = [s.get("run", "") for s in WORKFLOW["jobs"]["test"]["steps"]]
    assert steps.index("scripts/fetch-upstream") < steps.index("scripts/test -q")


# -- workflow hardening ------------------------------------------------------------------------
def all_steps():
    return [(job, step) for job, spec in WORKFLOW["jobs"].items() for step in spec["steps"]]


def test_every_action_is_pinned_to_a_commit():
    uses = [step["uses"] for _, step in all_steps() if "uses" in step]
    assert uses and all(PINNED.match(u) for u in uses), uses


def test_cloud_secrets_appear_only_in_the_step_that_needs_them():
    holders = [(job, step.get("name", step.get("uses"))) for job, step in all_steps() if "secrets." in json.dumps(step)]
    assert holders == [("pulumi-preview", "pulumi preview --stack ${{ matrix.stack }} --policy-pack policies")]
    assert all("secrets." not in json.dumps({k: v for k, v in spec.items() if k != "steps"})
               for spec in WORKFLOW["jobs"].values())
    assert "AWS_SECRET_ACCESS_KEY" not in (ROOT / ".github" / "workflows" / "preview.yml").read_text()


def test_the_cloud_job_is_protected_and_never_runs_a_forks_code():
    job = WORKFLOW["jobs"]["pulumi-preview"]
    assert job["environment"] == "cloud-preview"
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    aws = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    assert "role-to-assume" in aws["with"] and "aws-access-key-id" not in aws["with"]
    pulumi = next(s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["pulumi-version"] == "${{ env.PULUMI_VERSION }}"


def test_one_run_per_pull_request_at_a_time():
    assert WORKFLOW["concurrency"] == {"group": "preview-${{ github.event.pull_request.number || github.ref }}",
                                       "cancel-in-progress": True}



# -- the cloud preview's inputs, and the one rule for the policy config --------------------------------
def run_config_check(tmp_path, **variables) -> tuple[int, str, str]:
    """The config job's check step, run by bash as the runner runs it, with these repository variables."""
    step = WORKFLOW["jobs"]["cloud-preview-config"]["steps"][0]
    out = tmp_path / "github-output"
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out),
           **{k: "" for k in step["env"]}, **variables}
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout, out.read_text() if out.exists() else ""


CLOUD = {"STACKS": '["prod"]', "AWS_PREVIEW_ROLE_ARN": "arn:aws:iam::123456789012:role/llm-serving-ci-preview",
         "PULUMI_BACKEND_URL": "s3://state?region=us-east-1", "CLOUD_PREVIEW_RUNNER": "preview-runner"}


@pytest.mark.parametrize("variables, errors", [
    (CLOUD, []),
    ({**CLOUD, "AWS_PREVIEW_ROLE_ARN": "", "CLOUD_PREVIEW_RUNNER": ""},
     ["::error::repository variable AWS_PREVIEW_ROLE_ARN is unset (docs/ci-preview.md, step 6)",
      "::error::repository variable CLOUD_PREVIEW_RUNNER is unset (docs/ci-preview.md, step 6)"]),
    ({**CLOUD, "PULUMI_BACKEND_URL": "https://api.pulumi.com"},
     ["::error::PULUMI_BACKEND_URL is Pulumi Cloud: set repository variable PULUMI_ORG to the organization of the stacks"]),
    ({**CLOUD, "STACKS": "prod; rm -rf /"}, ['::error::CLOUD_PREVIEW_STACKS must be a JSON list of stack names, e.g. ["prod"]']),
    ({**CLOUD, "STACKS": '["$(id)"]'}, ['::error::CLOUD_PREVIEW_STACKS must be a JSON list of stack names, e.g. ["prod"]']),
], ids=["complete", "role-and-runner-unset", "cloud-without-org", "not-json", "not-a-name"])
def test_the_cloud_preview_names_each_missing_variable(tmp_path, variables, errors):
    code, stdout, output = run_config_check(tmp_path, **variables)
    assert stdout.splitlines() == errors and code == (1 if errors else 0)
    assert output == ("" if errors else 'stacks=["prod"]\n')


def test_the_workflow_and_the_makefile_pick_the_policy_config_by_one_rule():
    job = WORKFLOW["jobs"]["pulumi-preview"]
    policy = next(s for s in job["steps"] if s.get("id") == "policy")
    assert 'scripts/policy-config "$STACK"' in policy["run"] and policy["env"] == {"STACK": "${{ matrix.stack }}"}
    pulumi = next(s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["policyPackConfigs"] == "${{ steps.policy.outputs.config }}"
    assert "$(shell scripts/policy-config $(STACK))" in (ROOT / "Makefile").read_text()
    assert job["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.cloud-preview-config.outputs.stacks) }}"


@pytest.mark.parametrize("argv, code, out, err", [
    (["prod"], 0, "policies/config/prod.json\n", ""),
    (["my-org/staging"], 0, "policies/config/staging.json\n", ""),
    ([], 2, "", "policy-config: give one stack name (STACK or ORG/STACK)\n"),
    (["nope"], 2, "", None),
])
def test_policy_config_answers_or_fails_with_one_line(argv, code, out, err):
    done = subprocess.run([str(ROOT / "scripts" / "policy-config"), *argv], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (code, out)
    if err is not None:
        assert done.stderr == err
    else:
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("policy-config: ")
