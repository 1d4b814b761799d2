"""Reading a model input file as text: one line naming the option and the file on failure."""

from __future__ import annotations

from ...errors import ConfigError
from ...input_file import InputFileError, decode_utf8, read_input_bytes

MAX_INPUT_BYTES = 1 << 20     # a config.json, an argument list or a job TOML is a few kB


def read_text(path: str, option: str) -> str:
    try:
        return decode_utf8(read_input_bytes(path, MAX_INPUT_BYTES))
    except InputFileError as err:
        raise ConfigError(f"{option} {path}: {err.problem}") from None


def positive(value, where: str, what: str = "a positive integer") -> int:
    """``value`` when it is a positive int (not a bool), else the one-line refusal."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        found = "nothing" if value is None else repr(value)
        raise ConfigError(f"{where}: expected {what}, found {found}")
    return value
