"""The guard policy pack, as the Pulumi CLI runs it: `pulumi preview --policy-pack policies`.

Constructing the PolicyPack starts the analyzer's gRPC server and blocks forever, so this file
does nothing else; the policies live in importable modules (see registry.py).

Levels: `--policy-pack-config policies/config/<environment>.json` sets them explicitly; without
it the pack starts from the file of the stack's `llm-serving:environment` (which the CLI passes
in PULUMI_CONFIG), as the offline preview does, else every policy is mandatory.
"""
import sys
from pathlib import Path

# The CLI runs this folder by path (runpy), so the repository root is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.registry import PACK_NAME, POLICIES, levels, pack_environment  # noqa: E402

environment = pack_environment()

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    initial_config=dict(levels(environment)) if environment else None,
    description="llm-serving guards: no single-failure-domain layouts, no open endpoints, no plain secrets, "
                "no unapproved capacity-block purchases.",
)
