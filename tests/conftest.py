"""Shared fixtures. The program is built inside each test, under mocks set for that test only."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Upstream CRDs and captured samples, fetched (pinned URL + SHA-256) by scripts/fetch-upstream.
UPSTREAM = Path(os.environ.get("LLM_SERVING_UPSTREAM", ROOT / ".upstream"))


def upstream_path(relative: str) -> Path:
    """A fetched upstream file, or a failed test naming the script that fetches it."""
    path = UPSTREAM / relative
    if not path.is_file():
        pytest.fail(f"{path} missing: run scripts/fetch-upstream", pytrace=False)
    return path


@pytest.fixture
def upstream_file():
    return upstream_path


def stack_config(stack: str) -> dict:
    from settings import read_stack_config, stack_file
    return copy.deepcopy(read_stack_config(stack_file(stack)))


@pytest.fixture
def build_program():
    """build_program(stack, overrides={key: value}) -> Recording of every registered resource.

    Overrides replace whole `llm-serving:` keys (or `aws:region`) of the stack file's config.
    """
    def build(stack: str = "prod", overrides: dict | None = None, config: dict | None = None):
        from llmserve.engine import run_program
        raw = config if config is not None else stack_config(stack)
        for key, value in (overrides or {}).items():
            full = key if ":" in key else f"llm-serving:{key}"
            if value is None:
                raw.pop(full, None)
            else:
                raw[full] = value
        return run_program(stack, raw)
    return build
