"""Shared fixtures. The program is built inside each test, under mocks set for that test only."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LLM_SERVING_SHARED", ROOT.parent / "shared"))


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.fail(f"shared reference folder not found at {SHARED}; set LLM_SERVING_SHARED")
    return SHARED


def stack_config(stack: str) -> dict:
    from settings import read_stack_config, stack_file
    return copy.deepcopy(read_stack_config(stack_file(stack)))


@pytest.fixture
def build_program():
    """build_program(stack, overrides={key: value}) -> Recording of every registered resource.

    Overrides replace whole `llm-serving:` keys (or `aws:region`) of the stack file's config.
    """
    def build(stack: str = "prod", overrides: dict | None = None, config: dict | None = None):
        from offline.engine import run_program
        raw = config if config is not None else stack_config(stack)
        for key, value in (overrides or {}).items():
            full = key if ":" in key else f"llm-serving:{key}"
            if value is None:
                raw.pop(full, None)
            else:
                raw[full] = value
        return run_program(stack, raw)
    return build
