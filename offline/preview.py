"""`llmserve preview` as a library call: the program recorded under mocks, its plan, its
resources with secrets redacted, the policy results and the stack outputs.

A secret that lost its wrapping on the way into a plain input is a bug in the program: it is
never shown (scrubbed to "[secret]") and it is reported as a mandatory violation, so CI fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collector import paused_gc
from .engine import PLACEHOLDER_PREFIX, holds_placeholder
from .values import redacted, scrubbed

LEAKED_SECRET_POLICY = "preview-no-plaintext-secrets"


@dataclass
class Preview:
    stack: str
    settings: Any           # settings.StackSettings, as the program built them
    plan: dict              # sizing.report.plan_to_dict of the program's plan
    resources: list[dict]   # urn, type, name, id, parent, dependencies (URNs), inputs (redacted)
    violations: list[dict]  # policy, level, urn, message
    outputs: dict           # stack outputs (redacted)
    placeholder_secrets: list[str]   # the secret keys the program read as offline placeholders
    example_values: list[str] = field(default_factory=list)    # one line per example value a real deploy refuses (settings/examples.py)

    def as_dict(self) -> dict:
        return {"stack": self.stack, "plan": self.plan, "resources": self.resources,
                "violations": self.violations, "outputs": self.outputs,
                "placeholderSecrets": self.placeholder_secrets, "exampleValues": self.example_values}

    @property
    def mandatory_violations(self) -> int:
        return sum(v.get("level") == "mandatory" for v in self.violations)


def _leaked_secret(urn: str) -> dict:
    return {"policy": LEAKED_SECRET_POLICY, "level": "mandatory", "urn": urn,
            "message": "a secret reaches this resource's inputs unwrapped; read it with "
                       "settings.pulumi_config.secret() and keep it an Output"}


def preview_stack(stack: str, config: Path | None = None) -> Preview:
    """Record the stack's program and judge it. Raises `offline.stack.StackError` on bad config."""
    from settings.examples import example_values
    from sizing.report import plan_to_dict

    from .policy_run import evaluate
    from .stack import load_stack

    with paused_gc():     # the settings' models, the build and the policy run: see paused_gc
        recording = load_stack(stack, config).record()
        violations = [dict(v) for v in evaluate(recording, recording.settings.environment)]
    resources = [{"urn": r.urn, "type": r.type, "name": r.name, "id": r.id, "parent": r.parent,
                  "dependencies": list(r.dependencies), "inputs": redacted(r.inputs)} for r in recording.resources]
    for res in resources:
        if holds_placeholder(res["inputs"]):     # checked on the redacted copy the preview shows
            res["inputs"] = scrubbed(res["inputs"], PLACEHOLDER_PREFIX)
            violations.append(_leaked_secret(res["urn"]))
    return Preview(stack=stack, settings=recording.settings, plan=plan_to_dict(recording.plan),
                   resources=resources, violations=violations,
                   outputs=scrubbed(redacted(recording.outputs), PLACEHOLDER_PREFIX),
                   placeholder_secrets=[k for k in recording.placeholder_secrets
                                        if k.partition(":")[2] in recording.settings.required_secrets],
                   example_values=[v.line for v in example_values(recording.settings)])
