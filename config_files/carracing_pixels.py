"""CarRacing from pixels alone: `python scripts/train.py --config config_files/carracing_pixels.py`.

config_files/config.py's recipe with what the network sees cut to the picture (issue 48): the last 4 grey 48 x 48
frames of the built-in game's drawing (the fast renderer, the HUD cut off) as its channels, and as floats only the
mini-race clock and its own previous actions: nothing read from the game's memory (no centerline ahead, no car
state). The reward still pays the centerline progress and the road tiles the game measures (a reward is not an
input); the potential shaping, which reads the distance to the zone center from the floats, is off. The values that
differ from config.py are marked "pixels".
carracing_pixels.py names only those values (`base = "config.py"`: every other setting is config.py's, docs/config.md
§1.8).
Every setting is checked by `trackmania_rl/config/schema.py`; docs/config.md explains each.
"""

base = "config.py"

H_downsized = 48  # pixels: 48 x 48 trains ~40 % more batches in the same time than 64 x 64 (docs/results.md, issue 48)
W_downsized = 48  # pixels
frame_stack = 4  # [restart] pixels: the last 4 frames are the network's channels (its motion is in them)
float_inputs = "own_actions"  # pixels: the clock and the previous actions only
shaped_reward_dist_to_cur_vcp = 0.0  # pixels: off (it reads the distance to the zone center from the floats)
# the online weights at these minutes of training, kept as save/<run>/at-minute-MMM/
keep_weights_at_minutes = [30, 60, 90, 120]  # pixels: the hour's and the 2 hours' figures
