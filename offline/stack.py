"""One way from a stack name (or a `--config` file) to what the commands work on: the raw
stack config, the validated settings, the sizing plan, and the recorded program.

Every failure is a `StackError` that names where it came from (`--stack NAME` or
`--config PATH`) and lists the problems, each naming its key; the CLI prints it as one line.
Settings and sizing are imported when called, so `llmserve size` stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


class StackError(ValueError):
    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: " + "; ".join(problems))


@dataclass(frozen=True)
class LoadedStack:
    raw: dict           # the stack file's `config:` map
    settings: Any       # settings.StackSettings (None for the reference design)
    plan: Any           # sizing.planner.Plan


def source_of(stack: str | None, config: Path | None = None) -> str:
    """The option a stack problem is reported against."""
    if config is not None:
        return f"--config {config}"
    return f"--stack {stack}" if stack is not None else "--stack (reference)"


def read_config(stack: str, config: Path | None = None) -> dict:
    """The raw `config:` map of stacks/Pulumi.STACK.yaml, or of `config` when given."""
    from settings import SettingsError, read_stack_config, stack_file

    try:
        path = config or stack_file(stack)
        return read_stack_config(path)
    except SettingsError as exc:
        # `--config PATH` already names the file; a stack name does not, so keep the path there.
        problems = [p.removeprefix(f"{path}: ") for p in exc.problems] if config else exc.problems
        raise StackError(source_of(stack, config), problems) from None


def load_settings(stack: str, config: Path | None = None, raw: dict | None = None):
    """The validated settings of the stack (semantic checks included)."""
    from settings import SettingsError, settings_from_config

    raw = read_config(stack, config) if raw is None else raw
    try:
        return settings_from_config(stack, raw)
    except SettingsError as exc:
        raise StackError(source_of(stack, config), exc.problems) from None


def load_stack(stack: str | None, config: Path | None = None, raw: dict | None = None) -> LoadedStack:
    """Raw config, settings and plan; `stack=None` is the reference design (no stack file)."""
    from sizing.model import SizingError, Workload
    from sizing.planner import PlanRequest, plan

    if stack is None and config is None:
        settings, raw, request = None, {}, PlanRequest(workload=Workload())
    else:
        raw = read_config(stack, config) if raw is None else raw
        settings = load_settings(stack, config, raw)
    try:
        if settings is not None:
            request = settings.plan_request()      # the sizing refuses nan/inf figures here
        return LoadedStack(raw=raw, settings=settings, plan=plan(request))
    except SizingError as exc:
        raise StackError(source_of(stack, config), [f"no plan for this stack config: {exc}"]) from None


def record_stack(stack: str, config: Path | None = None):
    """Run the program for the stack under mocks: an `offline.engine.Recording` whose `settings`
    and `plan` are the ones the program built (nothing is built twice on the way)."""
    import pulumi

    from .engine import run_program

    raw = read_config(stack, config)
    # The stack file itself first: what only the file shows (a secret in plain text) never reaches
    # the program, which sees config values only through Pulumi's Config.
    load_settings(stack, config, raw)
    try:
        return run_program(stack, raw)
    except pulumi.ConfigMissingError as exc:       # a secret the stack file does not set
        load_stack(stack, config, raw)
        name = exc.key.partition(":")[2]
        raise StackError(source_of(stack, config),
                         [f"{exc.key}: missing; set it with `pulumi config set --secret {name} ...`"]) from None
    except (pulumi.RunError, ValueError) as exc:
        # Say which key is wrong, as every command does: the settings and the plan, checked
        # here only when the program failed, report that; otherwise a component refused.
        load_stack(stack, config, raw)
        raise StackError(source_of(stack, config), ["; ".join(" ".join(line.split()) for line in
                                                              str(exc).splitlines() if line.strip())]) from None
