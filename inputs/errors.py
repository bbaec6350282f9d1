"""The one error type of `inputs`: a ValueError whose message is one line naming the input."""
from __future__ import annotations


class InputError(ValueError):
    """One line: the file, document or URL, what is wrong with it, and the fix."""
