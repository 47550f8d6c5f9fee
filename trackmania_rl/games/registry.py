"""The game backends' names and physics steps: the one piece of game knowledge the config needs.

Constants only, no imports: the config loader imports this module (and so the `games` package, whose
__init__ is as light), and loading a config must not start numpy, gymnasium or Box2D. Everything else
about a backend is its description in games/backend.py.
"""

# Game time per physics step of every known backend, implemented or not (CarRacing: Box2D at 50 steps
# per game second; Trackmania: 100 Hz). The config derives `ms_per_action` from it.
MS_PER_PHYSICS_STEP = {"carracing": 20, "trackmania": 10}
DEFAULT_GAME_BACKEND = "carracing"  # the built-in game, and the only backend implemented so far
