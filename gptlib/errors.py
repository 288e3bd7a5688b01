"""The errors a user can cause: the command line prints one `error: ...` line, exits 2.

Hand-written plumbing, not generated from a notebook. Bad input (a wrong flag, a damaged file, a folder
that is not gptlib's) and an unfit environment (no GPU where one is asked for) raise a `GptlibError`
subclass whose message names the problem; anything else that escapes gptlib is a bug, and the command
line shows its traceback. Each error type also derives from the builtin a caller would expect
(`ValueError` for a bad value, ...), so code that catches those keeps working.
"""

from __future__ import annotations

__all__ = ["GptlibError", "ConfigError"]


class GptlibError(Exception):
    "Bad input or an unfit environment, never a bug in gptlib: reported in one line, with no traceback."


class ConfigError(GptlibError, ValueError, TypeError):
    "A configuration value gptlib cannot use (a field of a config dataclass, or the flag made from it)."
