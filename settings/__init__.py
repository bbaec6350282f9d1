"""Validated stack settings: the one door from `stacks/*.yaml` into the program."""
from .load import SettingsError, load_stack, read_stack_config, settings_from_config, stack_file  # noqa: F401
from .schema import NAMESPACE, SECRET_KEYS, StackSettings  # noqa: F401
