"""The Chakra execution-trace schema (ASTRA-sim 2.0's workload format), from the optional
``mlc-chakra`` package: one place that imports it, so both the exporter and the importer say the
same thing when it is missing.

An ET file is length-delimited protobuf: a ``GlobalMetadata`` message, then one ``Node`` per
message (each prefixed by its size as a varint), read and written with chakra's own ``protolib``.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..errors import ConfigError

INSTALL_HINT = 'pip install "pipesim[chakra]" (or: pip install --no-deps mlc-chakra protobuf)'

# attributes pipesim writes and reads back (names ASTRA-sim does not use)
NS = "pipesim."


def chakra(option: str) -> SimpleNamespace:
    """The schema module (``pb``) and chakra's ``encode``/``decode``/``open_read``; a one-line
    ConfigError naming ``option`` when mlc-chakra is not installed."""
    try:
        # optional extra (pipesim[chakra])
        from chakra.schema.protobuf import et_def_pb2 as pb
        from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage, openFileRd
    except ImportError as err:   # not installed, or a protobuf runtime too old for its schema
        raise ConfigError(f"{option}: needs the mlc-chakra package ({err}); install it with "
                          f"{INSTALL_HINT}") from None
    except Exception as err:   # protobuf's runtime-version check raises its own error types
        raise ConfigError(f"{option}: the mlc-chakra package does not load ({err}); install "
                          f"it with {INSTALL_HINT}") from None
    return SimpleNamespace(pb=pb, encode=encodeMessage, decode=decodeMessage,
                           open_read=openFileRd)


def attr_value(attr) -> object:
    """The value of a Chakra ``AttributeProto``, whichever field of its ``oneof`` holds it."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    if which.endswith("_list"):
        return list(value.values)
    return value
