"""Validated stack settings: the one door from `stacks/*.yaml` (and `llmserve size`'s flags) into the program."""
from .load import (SettingsError, read_stack_config, request_from_body, settings_from_config,  # noqa: F401
                   sizing_problem, stack_file, stack_settings)
from .schema import SECRET_KEYS, PlanRequestSettings, StackSettings  # noqa: F401
