"""SuperTuxKart time trials, Linesight's recipe: `python scripts/train.py --config config_files/supertuxkart.py`.

Set-up once: `pip install -e '.[supertuxkart]' && python -m trackmania_rl.games.supertuxkart.setup` (Debian's game data,
and the folder the game reads it from). config_files/config.py's recipe with the game's settings: the sections below
name only what differs (`base = "config.py"`). The network sees the road around the kart from above (drawn from the
track's driveline, not the game's picture) and floats read from the game: the kart's state and the driveline's zone
centers ahead. A race is one lap of a track at difficulty 3 (the game's fastest karts: compare with its AI there).
Every setting is checked by `trackmania_rl/config/schema.py`; docs/config.md explains each.
"""

base = "config.py"

# ---------------------------------------------------------------------------------------------------
# The game: one lap of time trial (games/supertuxkart/)
# ---------------------------------------------------------------------------------------------------
game_backend = "supertuxkart"  # [restart]
physics_steps_per_action = 1  # [restart] race steps of 100 ms an action is held for: 10 decisions a game second
supertuxkart_kart = "tux"  # [restart]
supertuxkart_difficulty = 3  # [restart] it scales every kart, ours too: 3 is the fastest, the AI's anchor times are there
supertuxkart_laps = 1  # [restart]
supertuxkart_view_m = 80.0  # [restart] road across the frame's width: 60 m ahead of the kart, 20 m behind
# native rules (held-out and evaluate.py races): a race not finished after this much game time ends (the game's AI
# takes 18-97 s a lap at difficulty 3; a kart stuck on a wall would hang an evaluation)
supertuxkart_native_time_cap_ms = 300_000
# [restart] drift and nitro where they pay: drifting through a bend charges a boost, nitro spends what was collected
action_set = [
    "accelerate",
    "accelerate+left",
    "accelerate+right",
    "accelerate+left+drift",
    "accelerate+right+drift",
    "accelerate+nitro",
    "accelerate+left+nitro",
    "accelerate+right+nitro",
    "coast",
    "left",
    "right",
    "brake",
    "brake+left",
    "brake+right",
]

# ---------------------------------------------------------------------------------------------------
# Zones along the driveline, and the floats
# ---------------------------------------------------------------------------------------------------
distance_between_checkpoints = 5.0  # [restart] the driveline's nodes are 2-15 m long
n_zone_centers_in_inputs = 16  # [restart]
one_every_n_zone_centers_in_inputs = 3  # [restart] 16 centers every 15 m: 240 m ahead, 8 s at the AI's speed
road_width = 30.0  # zone changes are accepted within ~15 m of the next center (roads are 8-18 m wide)

# ---------------------------------------------------------------------------------------------------
# Race cut-offs, rewards and the mini-race
# ---------------------------------------------------------------------------------------------------
cutoff_rollout_if_race_not_finished_within_duration_ms = 300_000
cutoff_rollout_if_no_vcp_passed_within_duration_ms = 5_000  # the game's own rescue after a fall takes ~2-3 s
reward_per_m_advanced_along_centerline = 1.0 / 40  # +1 per 40 m: break-even at 40 m/s, above a kart's top speed
reward_per_new_road_tile = 0.0  # CarRacing's
missed_road_tile_penalty = 0.0  # CarRacing's
temporal_mini_race_duration_ms = 7_000  # [restart] 70 actions, Linesight's horizon

# ---------------------------------------------------------------------------------------------------
# Maps: "track" or "track:reverse". Training: 16 tracks in both directions. Never trained, in either direction (the
# check at start refuses a run that trains on one, puts a track in both roles, or has fewer than 4 of them): 2 held-out
# tracks, on which best/ is chosen, and 3 test tracks, which carry the published figure and choose nothing (evaluate.py
# --tracks test). The held-out ones are the shortest laps (the game's AI at difficulty 3: minigolf 30.5 / 32.7 s,
# hacienda 39.9 / 41.3 s reversed), so that an evaluation stays cheap.
# ---------------------------------------------------------------------------------------------------
supertuxkart_held_out_tracks = [name + direction for name in ("hacienda", "minigolf") for direction in ("", ":reverse")]
supertuxkart_test_tracks = [name + direction for name in ("cornfield_crossing", "snowtuxpeak", "xr591") for direction in ("", ":reverse")]
_TRAINING_TRACKS = (
    "abyss",
    "black_forest",
    "candela_city",
    "cocoa_temple",
    "fortmagma",
    "gran_paradiso_island",
    "lighthouse",
    "mines",
    "olivermath",
    "ravenbridge_mansion",
    "sandtrack",
    "scotland",
    "snowmountain",
    "stk_enterprise",
    "volcano_island",
    "zengarden",
)
_TRAINING_MAPS = [name + direction for name in _TRAINING_TRACKS for direction in ("", ":reverse")]
# (map, the race's seed, is_explo, fill_buffer): each map explored 4 times for each greedy race
map_cycle = [(name, 0, True, True) for name in _TRAINING_MAPS] * 4 + [(name, 0, False, True) for name in _TRAINING_MAPS]
# one greedy lap on each held-out map (4 races: ~1,400 actions once the model finishes, at most 12,000 while it cannot, the
# native time cap; ~900-1,200 actions/s on one core): a few seconds of one core every 5 minutes
held_out_eval_period_s = 300
tail_score_bar = None  # a SuperTuxKart race scores 1000 - its time in s: no fixed bar of a lost race
keep_weights_at_minutes = [30, 60, 120, 240]
