"""The action set on SuperTuxKart: each action's controls (pystk2.Action's fields) and its flags.

An action is a dict of flags (config/schema.py parse_action_name): accelerate, brake, left, right, and the kart's own
drift, nitro and rescue where named. Left and right together steer straight.
"""

from __future__ import annotations

from trackmania_rl.config.schema import ACTION_FLAGS, KART_ACTION_FLAGS

FLAGS = ACTION_FLAGS + KART_ACTION_FLAGS  # the order of an action's flags in the floats


def flags_of(action: dict) -> tuple[float, ...]:
    """The action's seven flags as floats, in FLAGS order."""
    return tuple(float(action.get(flag, False)) for flag in FLAGS)


def controls_of(action: dict) -> tuple:
    """pystk2.Action's (acceleration, brake, steer, drift, nitro, rescue) for the action: full throttle, full lock
    (steer -1 is full left, +1 full right)."""
    steer = float(action.get("right", False)) - float(action.get("left", False))
    return (
        1.0 if action.get("accelerate") else 0.0,
        bool(action.get("brake")),
        steer,
        bool(action.get("drift")),
        bool(action.get("nitro")),
        bool(action.get("rescue")),
    )


def find_action(cfg, **flags) -> int:
    """The index of the action with exactly these flags set (ValueError if the action set lacks it)."""
    wanted = tuple(float(flags.get(flag, False)) for flag in FLAGS)
    for i, action in enumerate(cfg.inputs):
        if flags_of(action) == wanted:
            return i
    raise ValueError(f"the action set has no action with the flags {sorted(f for f, on in flags.items() if on)}")
