"""The guard policy pack, as the Pulumi CLI runs it: `pulumi preview --policy-pack policies`.

Constructing the PolicyPack starts the analyzer's gRPC server and blocks forever, so this file
does nothing else; the policies live in importable modules (see registry.py).

Levels: `--policy-pack-config policies/config/<stack>.json` sets them explicitly; without it the
pack starts from the file named after the stack being previewed, if any, else mandatory.
"""
import os
import sys
from pathlib import Path

# The CLI runs this folder by path (runpy), so the repository root is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies.registry import PACK_NAME, POLICIES, levels  # noqa: E402

stack = os.environ.get("PULUMI_STACK", "").rsplit("/", 1)[-1]

PolicyPack(
    name=PACK_NAME,
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    initial_config=dict(levels(stack)) if stack else None,
    description="llm-serving guards: no single-failure-domain layouts, no open endpoints, no plain secrets, "
                "no unapproved capacity-block purchases.",
)
