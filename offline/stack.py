"""The one way from a stack name (or a `--config` file, or neither: the reference design) to what
the commands work on: `load_stack` returns a `LoadedStack` (the raw stack config, the validated
settings, and on demand the sizing plan and the recorded program). Every command reads its stack
through it.

Every failure is a `StackError` that names where it came from (`--stack NAME` or
`--config PATH`) and lists the problems, each naming its key; the CLI prints it as one line.
Settings and sizing are imported when called, so `llmserve size` stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any


class StackError(ValueError):
    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"{source}: " + "; ".join(problems))


def source_of(stack: str | None, config: Path | None = None) -> str:
    """The option a stack problem is reported against."""
    if config is not None:
        return f"--config {config}"
    return f"--stack {stack}" if stack is not None else "--stack (reference)"


@dataclass(frozen=True)
class LoadedStack:
    """A stack as every command reads it. `settings` is None for the reference design (no stack
    file): its plan request is `settings.schema.REFERENCE_REQUEST`."""
    name: str | None
    config: Path | None
    raw: dict           # the stack file's `config:` map ({} for the reference design)
    settings: Any       # settings.StackSettings, validated (semantic checks included), or None

    @property
    def source(self) -> str:
        return source_of(self.name, self.config)

    @property
    def request(self):
        """The `settings.PlanRequestSettings` the plan is made from."""
        from settings import request_from_body
        from settings.schema import REFERENCE_REQUEST
        return self.settings if self.settings is not None else request_from_body(REFERENCE_REQUEST)

    @property
    def namespace(self) -> str:
        """The serving namespace (the stack's, or the default for the reference design)."""
        from conventions import SERVING_NAMESPACE
        return self.settings.serving.namespace if self.settings is not None else SERVING_NAMESPACE

    @cached_property
    def plan(self):
        """The sizing plan (`sizing.planner.Plan`); a plan the sizing refuses names its key."""
        from settings import sizing_problem
        from sizing.planner import plan
        from sizing.workload import SizingError

        try:
            made = plan(self.request.plan_request())
        except SizingError as exc:
            raise StackError(self.source, [sizing_problem(exc)]) from None
        if self.settings is not None:       # a setting the plan's layout would ignore: refused, as the program does
            from deployment.spec import layout_problems
            problems = layout_problems(made, self.settings)
            if problems:
                raise StackError(self.source, problems)
        return made

    def record(self):
        """Run the program for the stack under mocks: an `offline.engine.Recording` whose
        `settings` and `plan` are the ones the program built (nothing is built twice on the way)."""
        import pulumi

        from .engine import run_program

        try:
            return run_program(self.name, self.raw)
        except pulumi.ConfigMissingError as exc:       # a secret the stack file does not set
            self.plan
            name = exc.key.partition(":")[2]
            raise StackError(self.source,
                             [f"{exc.key}: missing; set it with `pulumi config set --secret {name} ...`"]) from None
        except (pulumi.RunError, ValueError) as exc:
            # Say which key is wrong, as every command does: the plan, checked here only when the
            # program failed, reports that; otherwise a component refused.
            self.plan
            raise StackError(self.source, ["; ".join(" ".join(line.split()) for line in
                                                     str(exc).splitlines() if line.strip())]) from None


def _read_config(stack: str, config: Path | None) -> dict:
    """The raw `config:` map of stacks/Pulumi.STACK.yaml, or of `config` when given."""
    from settings import SettingsError, read_stack_config, stack_file

    try:
        path = config or stack_file(stack)
        return read_stack_config(path)
    except SettingsError as exc:
        # `--config PATH` already names the file; a stack name does not, so keep the path there.
        problems = [p.removeprefix(f"{path}: ") for p in exc.problems] if config else exc.problems
        raise StackError(source_of(stack, config), problems) from None


def load_stack(stack: str | None, config: Path | None = None, raw: dict | None = None) -> LoadedStack:
    """The stack's raw config and validated settings (the plan and the recording on demand);
    `stack=None` without `config` is the reference design. The stack file itself is checked
    first: what only the file shows (a secret in plain text) never reaches the program."""
    from settings import SettingsError, settings_from_config
    from settings.load import files_resolved, stacks_dir

    if stack is None and config is None:
        return LoadedStack(None, None, {}, None)
    if stack is None:       # `--config PATH` alone (size takes it so): the stack is the file's name
        stack = config.name.removeprefix("Pulumi.").removesuffix(".yaml")
    raw = _read_config(stack, config) if raw is None else raw
    # The files the stack names, from its file's folder: the program, recorded, reads the same ones.
    folder = config.parent if config is not None else stacks_dir()
    resolved, problems = files_resolved(raw, folder)
    raw = raw if problems else resolved          # a problem: settings_from_config reports it
    try:
        settings = settings_from_config(stack, raw, folder)
    except SettingsError as exc:
        raise StackError(source_of(stack, config), exc.problems) from None
    return LoadedStack(stack, config, raw, settings)
