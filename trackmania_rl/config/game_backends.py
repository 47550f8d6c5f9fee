"""The game backends' names and physics steps: the one piece of game knowledge a config needs.

Constants only, no imports: the config derives `ms_per_action` from them, and loading a config must not start
numpy, gymnasium or Box2D. They sit here, in the ground every layer uses, so that the config never imports the
games (a layer above it); everything else about a backend is its description in games/backend.py.
"""

# Game time per physics step of every known backend, implemented or not (CarRacing: Box2D at 50 steps
# per game second; Trackmania: 100 Hz; SuperTuxKart: one `race.step` of pystk2, its RaceConfig.step_size of 0.1 s).
# The config derives `ms_per_action` from it.
# Gymnasium: None, the config says (`gymnasium_ms_per_step`: an env step's game time depends on the env).
MS_PER_PHYSICS_STEP = {"carracing": 20, "trackmania": 10, "gymnasium": None, "supertuxkart": 100}
GAME_BACKENDS = tuple(MS_PER_PHYSICS_STEP)
DEFAULT_GAME_BACKEND = "carracing"  # the built-in game
GYMNASIUM = "gymnasium"  # any registered Gymnasium env with an image observation (games/gymnasium/)
SUPERTUXKART = "supertuxkart"  # SuperTuxKart time trials through pysupertuxkart2 (games/supertuxkart/)
# How CarRacing's frames are drawn (config setting `frame_renderer`; games/car_racing/env.py): "fast" straight at the
# frame's size, "pygame" by CarRacing's own drawing into its 1000 x 800 window, smoothscaled
RENDERER_FAST = "fast"
RENDERER_PYGAME = "pygame"
FRAME_RENDERERS = (RENDERER_FAST, RENDERER_PYGAME)
# What ends a race (config setting `held_out_rules`, evaluate.py --rules; games/base.py says what each means)
RULES_NATIVE = "native"
RULES_TRAINING = "training"
RACE_RULES = (RULES_NATIVE, RULES_TRAINING)
