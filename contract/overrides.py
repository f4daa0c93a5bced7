"""Command-line and environment overrides of a profile's fields, applied to the profile's data before it is
validated, so an override is checked exactly like the file (errors name the field):

    tailrace run PROFILE --set load.rate=500 --set regions.0.share=0.5
    TAILRACE_SET_LOAD__RATE=500 tailrace run PROFILE          # containers: `__` separates the path

Values are TOML (`500`, `0.5`, `true`, `"text"`, `[1, 2]`); a bare word is a string. The effective overrides are
recorded in the manifest (the profile's `overrides`)."""
from __future__ import annotations

import copy
import os
import tomllib
from collections.abc import Mapping

ENV_PREFIX = "TAILRACE_SET_"


class OverrideError(ValueError):
    """An override that cannot be applied (names the override)."""


def parse_value(text: str):
    """A TOML value, or the text itself when it is not one (a bare word)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def from_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """`key=value` overrides from TAILRACE_SET_* variables (sorted, so the order is reproducible)."""
    environ = os.environ if environ is None else environ
    return [f"{name[len(ENV_PREFIX):].lower().replace('__', '.')}={value}"
            for name, value in sorted(environ.items()) if name.startswith(ENV_PREFIX)]


def apply(data: dict, overrides: list[str]) -> dict:
    """A copy of the profile's `data` with every `path=value` override set; list items by index (regions.0.share)."""
    out = copy.deepcopy(data)
    for override in overrides:
        path, sep, raw = override.partition("=")
        if not sep or not path.strip():
            raise OverrideError(f"--set {override!r}: expected FIELD=VALUE (e.g. load.rate=500)")
        keys = path.strip().split(".")
        node = out
        for depth, key in enumerate(keys[:-1]):
            node = _child(node, key, keys[:depth + 1], override)
        last = keys[-1]
        if isinstance(node, list):
            index = _index(node, last, keys, override)
            node[index] = parse_value(raw.strip())
        else:
            node[last] = parse_value(raw.strip())
    return out


def _child(node, key: str, path: list[str], override: str):
    if isinstance(node, list):
        return node[_index(node, key, path, override)]
    if not isinstance(node, dict):
        raise OverrideError(f"--set {override!r}: {'.'.join(path[:-1])} is a value, not a table")
    return node.setdefault(key, {})


def _index(node: list, key: str, path: list[str], override: str) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise OverrideError(f"--set {override!r}: {'.'.join(path)}: the profile has {len(node)} item(s) there "
                            f"(indexes 0–{len(node) - 1})")
    return int(key)
