"""Reading a YAML file the user gave us (a system, a calibration, a sweep spec, stage costs):
one ConfigError naming the file (and line:column where there is one) for anything wrong with it.

The file is read through :mod:`simulator.input_file` (no FIFO, device or directory, a size
limit, UTF-8). Two things PyYAML would let through are refused here, where the line is known:
a number YAML 1.1 reads as text (``1e308``, ``1.0e308``: its float needs a dot and a signed
exponent), which a check further on could only call "not a number", and an integer or float
beyond what a float holds (a 400-digit cost), which would overflow wherever it is used.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .input_file import MAX_YAML_BYTES, InputFileError, decode_utf8, read_input_bytes

if TYPE_CHECKING:
    from pathlib import Path

# a number in YAML 1.2 (and JSON, Python) that YAML 1.1 resolves as a string
_NUMBER_LIKE = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+")
_FLOAT_MAX = sys.float_info.max


def read_yaml(path: str | Path, unreadable: str) -> Any:
    """The parsed document at ``path``. ``unreadable`` starts the message when the file cannot
    be read, e.g. ``"--system: cannot read sys.yaml"``."""
    import yaml  # only when a file is given: keeps `pipesim run` start-up light

    try:
        text = decode_utf8(read_input_bytes(path, MAX_YAML_BYTES))
    except InputFileError as err:
        line_col, sep, rest = err.problem.partition(": ")
        if sep and line_col.replace(":", "").isdigit():
            raise ConfigError(f"{path}:{line_col}: {rest}; expected a YAML file") from None
        raise ConfigError(f"{unreadable}: {err.problem}") from None
    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(err, 'problem', None) or err}") \
            from None
    except _Refused as err:
        mark = err.node.start_mark
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {err.message}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None


class _Refused(Exception):
    def __init__(self, node, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


_LOADER = None


def _loader():
    """PyYAML's safe loader, refusing numbers it would read as text and numbers beyond a
    float's range (built once, on first use). The Python parser, not the C one: the C parser
    recurses once per nesting level on the C stack, and 50,000 nested '- ' crash the process;
    the Python parser's recursion is a RecursionError, reported as one line."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    # deferred (start-up)
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def text(loader, node):
        value = loader.construct_scalar(node)
        if not node.style and _NUMBER_LIKE.fullmatch(value):
            raise _Refused(node, f"YAML reads {value} as text, not a number; write "
                                 f"{_as_yaml_float(value)} (or quote it if it is text)")
        return value

    def integer(loader, node):
        digits = len(node.value.lstrip("+-").replace("_", ""))
        beyond = _Refused(node, f"a {digits}-digit integer is beyond the largest number "
                                f"pipesim takes ({_FLOAT_MAX:.6g})")
        try:
            value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
        except ValueError:   # past Python's 4300-digit limit on int()
            raise beyond from None
        if abs(value) > _FLOAT_MAX:
            raise beyond
        return value

    def floating(loader, node):
        value = yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)
        if value in (float("inf"), float("-inf")) and "inf" not in node.value.lower():
            raise _Refused(node, f"{node.value} is beyond the largest number pipesim takes "
                                 f"({_FLOAT_MAX:.6g})")
        return value

    Loader.add_constructor("tag:yaml.org,2002:str", text)
    Loader.add_constructor("tag:yaml.org,2002:int", integer)
    Loader.add_constructor("tag:yaml.org,2002:float", floating)
    _LOADER = Loader
    return Loader


def _as_yaml_float(text: str) -> str:
    """``1e308`` -> ``1.0e+308``: the spelling YAML 1.1 reads as a float (a dot in the
    mantissa, a sign on the exponent)."""
    mantissa, _, exponent = text.replace("E", "e").partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    elif mantissa.endswith("."):
        mantissa += "0"
    if mantissa.lstrip("+-").startswith("."):
        sign = mantissa[0] if mantissa[0] in "+-" else ""
        mantissa = sign + "0" + mantissa.lstrip("+-")
    if exponent[:1] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}"
