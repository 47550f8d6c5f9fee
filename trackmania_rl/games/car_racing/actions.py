"""The action set on CarRacing: each action's continuous control (steer, gas, brake) and its four flags."""

from __future__ import annotations

import numbers

import numpy as np

from trackmania_rl.games.car_racing import floats as car_floats


def action_tables(cfg) -> tuple[list, list]:
    """Per action: CarRacing's continuous control (steer, gas, brake) and the four input flags."""
    settings = cfg.input_settings
    magnitudes = {}
    for name in ("car_racing_steer", "car_racing_gas", "car_racing_brake"):
        value = settings.get(name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
            raise ValueError(f"config_files/inputs_list.py: `{name}` = {value!r} must be a number in (0, 1]")
        magnitudes[name] = float(value)
    controls, flags = [], []
    for action in cfg.inputs:
        steer = magnitudes["car_racing_steer"] * (float(action["right"]) - float(action["left"]))  # -1 = full left
        gas = magnitudes["car_racing_gas"] if action["accelerate"] else 0.0
        brake = magnitudes["car_racing_brake"] if action["brake"] else 0.0
        controls.append(np.array([steer, gas, brake], dtype=np.float64))
        flags.append([float(action[f]) for f in car_floats.ACTION_FLAGS])
    return controls, flags


def find_action(cfg, accelerate=False, brake=False, left=False, right=False) -> int:
    """The index of the action with exactly these flags (ValueError if the action set lacks it)."""
    wanted = {"accelerate": accelerate, "brake": brake, "left": left, "right": right}
    for i, action in enumerate(cfg.inputs):
        if action == wanted:
            return i
    raise ValueError(f"the action set has no action {wanted}")
