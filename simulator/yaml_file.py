"""Reading a YAML file the user gave us: one ConfigError naming file:line:column on bad syntax."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def read_yaml(path: str | Path, unreadable: str) -> Any:
    """The parsed document at ``path``. ``unreadable`` starts the message when the file cannot
    be read, e.g. ``"--system: cannot read sys.yaml"``."""
    from pathlib import Path  # only when a file is given, like yaml: start-up

    import yaml  # only when a file is given: keeps `pipesim run` start-up light

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError(f"{unreadable}: {err.strerror or err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(err, 'problem', None) or err}") \
            from None
