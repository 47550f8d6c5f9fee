"""Atari 2600 Enduro (ALE/Enduro-v5) from pixels alone: `python scripts/train.py --config config_files/enduro.py`.

config_files/config.py's recipe with the game's settings: the first section below, then the values where the default
file has CarRacing's (docs/enduro.md says how each was chosen and what it reached). The network sees the last 4 grey
84 x 84 frames and its own previous actions, nothing read from the game's memory; the reward is the game's own (+1 for
each car passed, -1 for each car that passes back), clipped to +-1.
enduro.py names only these values (`base = "config.py"`: every other setting is config.py's, docs/config.md §1.8);
a few equal config.py's today and are named for the game's sake (its timing, options and picture, the race cut-off).
Every setting is checked by `trackmania_rl/config/schema.py`; docs/config.md explains each.
"""

base = "config.py"

# ---------------------------------------------------------------------------------------------------
# The game: ALE/Enduro-v5 with its defaults (4 frames an action, sticky actions 0.25, 9 actions, 108,000 frames)
# ---------------------------------------------------------------------------------------------------
game_backend = "gymnasium"  # [restart]
gymnasium_env_id = "ALE/Enduro-v5"  # [restart]
gymnasium_ms_per_step = 1000 * 4 / 60  # [restart] game time of one env step: 4 frames at 60 Hz
# [restart] Enduro's minimal action set, by the flags: FIRE accelerates, DOWN brakes
action_set = ["coast", "accelerate", "right", "left", "brake", "brake+right", "brake+left", "accelerate+right", "accelerate+left"]
gymnasium_action_words = ("FIRE", "DOWN", "LEFT", "RIGHT")  # [restart] accelerate, brake, left, right in its action meanings
frame_stack = 4  # [restart] the last 4 frames are the network's channels
frame_colour = False  # [restart] grey frames (True: R, G, B, 3 channels a frame)
gymnasium_env_kwargs = None  # [restart] ALE/Enduro-v5's own defaults (sticky actions 0.25)
frame_crop = None  # [restart] (top, bottom, left, right) pixels cut from the env's 160 x 210 picture
reward_per_game_point = 1.0  # x the game's own reward of each step
game_reward_clip = 1.0  # clipped to +-1 first, as Atari agents do

# ---------------------------------------------------------------------------------------------------
# Where config.py has CarRacing's values
# ---------------------------------------------------------------------------------------------------

physics_steps_per_action = 1  # env steps per decision: the env itself repeats an action 4 frames
H_downsized = 84
W_downsized = 84
cutoff_rollout_if_race_not_finished_within_duration_ms = 60_000  # an episode (up to 30 min) goes to the learner a minute at a time
constant_reward_per_ms = 0.0  # the game scores itself
reward_per_m_advanced_along_centerline = 0.0  # no centerline
shaped_reward_dist_to_cur_vcp = 0.0  # no centerline: no shaping
reward_per_new_road_tile = 0.0  # no road tiles
missed_road_tile_penalty = 0.0  # no road tiles
temporal_mini_race_duration_ms = 8_000  # [restart] horizon: 119 actions
memory_size_schedule = [(0, (200_000, 5_000))]
number_times_single_memory_is_used_before_discard = 4  # each stored transition sampled ~4 times (Dopamine: 8); the learner sets the pace
conv_layers = [(32, 8, 4), (64, 4, 2), (64, 3, 1)]  # [restart] Nature DQN's (IQN's and Dopamine's) convolutions
batch_size = 32  # [restart]
map_cycle = [("train", range(1_000, 50_000), True, True)]  # env reset seeds; held out 100-102, validation and test below
held_out_seeds = range(100, 103)  # env reset seeds; one Enduro episode lasts up to 30 min of game time (~1 min here)
held_out_eval_period_s = 900
# best/ by the plain mean of the held-out episodes: Enduro's scores have no lost-race bar as CarRacing's 800
tail_score_bar = None
best_tail_penalty = 0.0
# Enduro's sets (env reset seeds): 500000-500009 compared the arms of issue 47 (validation); the test episodes, named
# 2026-12-02 before any model was measured on them, are 600000-600029
validation_seeds = [range(500_000, 500_010)]
test_seeds = [range(600_000, 600_030)]
