"""The measurements behind fast_view.py's calibration constants, printed as JSON lines (one per setting):

- SMOOTHSCALE_LOSS: how many grey levels pygame's smoothscale takes off a uniform colour on its way from CarRacing's
  window to the frame (per channel, for each of CarRacing's colours and a ramp of greys).
- GROW_ROAD_PX and GROW_CAR_PX: the fast renderer's frames against the pygame renderer's, as the `game` benchmark
  measures them (frame_fidelity.py: the shipped model's greedy races on seeds 200-205, and random controls on
  210-212), with the road's growth swept at the car's chosen value and the car's at the road's.

    python docs/runs/2026-11-28_fast_view_calibration/calibrate.py > docs/runs/2026-11-28_fast_view_calibration/calibration.jsonl
"""

import json
import sys

import numpy as np
import pygame
from gymnasium.envs.box2d import car_racing as gym_car_racing

from trackmania_rl.benchmarks import frame_fidelity
from trackmania_rl.device import cpu_model
from trackmania_rl.games.car_racing import fast_view

WEIGHTS = "models/carracing_default/weights.torch"
ROAD_SWEEP = (0.5, 0.75, 1.0, 1.25)
CAR_SWEEP = (0.0, 0.25, 0.5, 0.75)


def smoothscale_losses() -> dict:
    """Per channel value, the levels smoothscale takes off a uniform window-sized surface on its way to 64 x 64."""
    losses = {}
    for value in sorted({*range(0, 256, 17), 102, 107, 204, 230}):  # a ramp, and CarRacing's road and grass levels
        surface = pygame.Surface((gym_car_racing.WINDOW_W, gym_car_racing.WINDOW_H))
        surface.fill((value, value, value))
        left = np.unique(pygame.surfarray.array3d(pygame.transform.smoothscale(surface, (64, 64))))
        losses[value] = sorted({value - int(v) for v in left})
    return {"figure": "smoothscale_loss_by_channel_value", "value": losses}


def fidelity(road: float, car: float) -> dict:
    fast_view.GROW_ROAD_PX, fast_view.GROW_CAR_PX = road, car  # read by each FastFrameRenderer as it is made
    figures = {f["figure"]: f for f in frame_fidelity.run(WEIGHTS, quick=False)}
    greedy, random_controls = figures["game.fast_frame_abs_diff"], figures["game.fast_frame_abs_diff_random_controls"]
    return {
        "figure": "fast_frame_abs_diff_by_growth",
        "grow_road_px": road,
        "grow_car_px": car,
        "greedy_races_mean": greedy["value"],
        "random_controls_mean": random_controls["value"],
        "random_controls_by_part": random_controls["mean_by_part"],
        "same_action_fraction": figures["game.fast_frame_same_action_fraction"]["value"],
    }


def main() -> None:
    chosen_road, chosen_car = fast_view.GROW_ROAD_PX, fast_view.GROW_CAR_PX
    print(json.dumps({"cpu": cpu_model(), "weights": WEIGHTS, "chosen": [chosen_road, chosen_car], "python": sys.version.split()[0]}))
    print(json.dumps(smoothscale_losses()), flush=True)
    for road in ROAD_SWEEP:
        print(json.dumps(fidelity(road, chosen_car)), flush=True)
    for car in CAR_SWEEP:
        if car != chosen_car:
            print(json.dumps(fidelity(chosen_road, car)), flush=True)


if __name__ == "__main__":
    main()
