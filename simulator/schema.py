"""JSON Schema (draft 2020-12) derived from the classes that describe pipesim's JSON outputs:
dataclasses, and NamedTuples (the run's summary, which ``pipesim run`` builds without the
``dataclasses`` module).

Field types give the JSON types (``int`` integer, ``float`` number, ``str`` string, ``bool``
boolean, ``X | None`` nullable, tuples and lists arrays, nested records objects, ``dict``
objects); the descriptions are a dataclass field's ``field(metadata={"help": ...})`` or a
NamedTuple field's ``Annotated[type, "help"]``, and fields without a default are required.
Nothing here imports a validator: ``pipesim <command> --json-schema`` prints the schema, and the
tests validate every command's output against it with ``jsonschema``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _of_type(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if tp is Any or tp is object:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_of_type(a, defs) for a in args if a is not type(None)]
        base = options[0] if len(options) == 1 else {"anyOf": options}
        if type(None) in args:
            return {"anyOf": [base, {"type": "null"}]}
        return base
    if origin in (tuple, list):
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [_of_type(a, defs) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items),
                    "maxItems": len(items)}
        return {"type": "array", "items": _of_type(args[0], defs) if args else {}}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if dataclasses.is_dataclass(tp) or _is_named_tuple(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}
            defs[name] = _object(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    simple = {int: "integer", float: "number", str: "string", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no JSON type for {tp!r}")


def _is_named_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _fields(cls: type) -> list[tuple[str, Any, str | None, bool]]:
    """(name, type, help, required) of each field of a dataclass or a NamedTuple."""
    if _is_named_tuple(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        out = []
        for name in cls._fields:
            tp, help_text = hints[name], None
            if typing.get_origin(tp) is typing.Annotated:
                tp, *extras = typing.get_args(tp)
                help_text = next((e for e in extras if isinstance(e, str)), None)
            out.append((name, tp, help_text, name not in cls._field_defaults))
        return out
    hints = typing.get_type_hints(cls)
    return [(f.name, hints[f.name], f.metadata.get("help") if f.metadata else None,
             f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(cls)]


def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    for name, tp, help_text, needed in _fields(cls):
        if name.startswith("_"):
            continue
        prop = _of_type(tp, defs)
        if help_text:
            prop = {**prop, "description": help_text}
        props[name] = prop
        if needed:
            required.append(name)
    out: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    if doc:
        out["description"] = " ".join(doc.split())
    return out


def schema_of(cls: type, title: str, *, array: bool = False,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema of ``cls`` (or of a list of it), ``extra`` properties merged in at the top."""
    defs: dict[str, Any] = {}
    body = _object(cls, defs)
    if extra:
        body["properties"].update(extra)
    if array:
        defs[cls.__name__] = body
        root = {"type": "array", "items": {"$ref": f"#/$defs/{cls.__name__}"}}
    else:
        root = body
    out = {"$schema": DIALECT, "title": title, **root}
    if defs:
        out["$defs"] = defs
    return out
