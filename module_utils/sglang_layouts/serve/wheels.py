"""Pip steps of the sglang_venv role: exact pins from a wheelhouse, pins a base env supplies.

Pure functions, used through filter_plugins/sglang_layouts.py. Names are compared in the
normalised form of PEP 503 (lower case, runs of -_. as one -), the form pip compares.
"""

from __future__ import annotations

import re

_SEP = re.compile(r"[-_.]+")
# A pin as the role writes it: name, optional [extras], then a specifier (==, >=, ...) or nothing.
_PIN_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class WheelError(ValueError):
    pass


def canonical_name(name: str) -> str:
    return _SEP.sub("-", name).lower()


def wheel_pin(filename: str) -> str:
    """'sglang-0.5.16-cp312-cp312-manylinux_2_34_x86_64.whl' -> 'sglang==0.5.16'.

    A wheel's file name is name-version[-build]-python-abi-platform.whl; the name has no
    dash in it (wheel builders write '_'), so the version is always the second field.
    """
    base = filename.rsplit("/", 1)[-1]
    if not base.endswith(".whl"):
        raise WheelError(f"{filename}: not a wheel (the name must end in .whl)")
    parts = base[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise WheelError(f"{filename}: not a wheel file name (name-version[-build]-python-abi-platform.whl)")
    return f"{canonical_name(parts[0])}=={parts[1]}"


def wheel_pins(filenames) -> list[str]:
    """One exact pin per distribution, sorted by name; two versions of one name are an error
    (--no-deps installs exactly the wheelhouse, so it must say which version it means)."""
    pins: dict[str, str] = {}
    for f in filenames:
        pin = wheel_pin(str(f))
        name = pin.split("==", 1)[0]
        if name in pins and pins[name] != pin:
            raise WheelError(f"the wheelhouse holds two versions of {name}: {pins[name]} and {pin}")
        pins[name] = pin
    return [pins[n] for n in sorted(pins)]


def pin_name(pin: str) -> str:
    m = _PIN_NAME.match(pin)
    if not m:
        raise WheelError(f"{pin!r}: not a requirement (name==version)")
    return canonical_name(m.group(1))


def drop_pins(steps, names) -> list[dict]:
    """The steps without the pins of `names` (what a base env supplies); a step left with no
    pin is dropped with its extra_args (its index URL, say, is then not needed)."""
    drop = {canonical_name(str(n)) for n in names}
    out = []
    for step in steps:
        kept = [str(p) for p in step["name"] if pin_name(str(p)) not in drop]
        if kept:
            out.append({**step, "name": kept})
    return out
