"""SuperTuxKart time trials, Linesight's recipe: `python scripts/train.py --config config_files/supertuxkart.py`.

Set-up once: `pip install -e '.[supertuxkart]' && python -m trackmania_rl.games.supertuxkart.setup` (Debian's game data,
and the folder the game reads it from). config_files/config.py's recipe with the game's settings: the sections below
name only what differs (`base = "config.py"`). The network sees the road around the kart from above (drawn from the
track's driveline, not the game's picture) and floats read from the game: the kart's state and the driveline's zone
centers ahead. A race is one lap of a track at difficulty 3 (the game's fastest karts: compare with its AI there).
Every setting is checked by `trackmania_rl/config/schema.py`; docs/config.md explains each.
"""

# Written whole from config_files/supertuxkart.py over config_files/config.py.
# supertuxkart.py names only what differs from its base: this is the base's text with those settings in place, so
# every setting in force is in this file.

# ---------------------------------------------------------------------------------------------------
# The game: one lap of time trial (games/supertuxkart/)
# ---------------------------------------------------------------------------------------------------
game_backend = "supertuxkart"  # [restart]

# ---------------------------------------------------------------------------------------------------
# Game time and images
# ---------------------------------------------------------------------------------------------------
# [restart] Physics steps one action is held for. CarRacing runs 50 physics steps per game second,
# so 4 steps = 80 ms per action (12.5 decisions per second).
physics_steps_per_action = 1  # [restart] race steps of 100 ms an action is held for: 10 decisions a game second
# [restart] Size of the grey frame the network sees (the HUD bar is cut off before resizing).
H_downsized = 64
W_downsized = 64
# [restart] How frames are drawn: "fast" (the scene drawn straight at the frame's size, ~11x cheaper to draw) or "pygame"
# (CarRacing's own drawing into its 1000 x 800 window, smoothscaled; pixel-exact). docs/config.md says how they differ.
frame_renderer = "fast"
# [restart] CarRacing: True makes the frame the whole view with its HUD bar (speed, ABS, steering and gyro bars; not the
# score digits) in its bottom 5/40 rows, as Gymnasium's observation has it; False: the view above the HUD only.
frame_hud = False
# [restart] True: each frame in colour, 3 channels (R, G, B) instead of one grey, so the network has 3 x frame_stack channels
frame_colour = False

# ---------------------------------------------------------------------------------------------------
# Games from pixels: the Gymnasium backend (config_files/enduro.py sets these; docs/config.md §2.14). The game is
# user_config.game_backend's unless a config sets `game_backend`.
# ---------------------------------------------------------------------------------------------------
frame_stack = 1  # [restart] frames per state, the network's channels (CarRacing: 1, its motion is in the floats)
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
reward_per_game_point = 0.0  # x the game's own reward of each step (CarRacing: its native score's terms; the recipe's are below)
game_reward_clip = None  # the game's reward of a step clipped to +- this first (None: not clipped)
gymnasium_env_id = None  # [restart] a registered Gymnasium env id, e.g. "ALE/Enduro-v5"
gymnasium_ms_per_step = 1000 * 4 / 60  # [restart] game time of one env step (ALE v5: 4 frames at 60 Hz)
gymnasium_action_words = None  # [restart] the env's action-meaning words of (accelerate, brake, left, right)
gymnasium_actions = None  # [restart] or the env's action number of each action of the action set
gymnasium_env_kwargs = None  # [restart] keyword arguments of gymnasium.make, e.g. {"continuous": False}
frame_crop = None  # [restart] (top, bottom, left, right) pixels cut from the env's image before resizing

# ---------------------------------------------------------------------------------------------------
# Float inputs (the layout is declared once in trackmania_rl/games/car_racing/floats.py)
# ---------------------------------------------------------------------------------------------------
# [restart] "game": every float the game gives (CarRacing: the car's state and the centerline ahead, read from the game);
# "own_actions": only the mini-race clock and the agent's previous actions (a pixels-only agent)
float_inputs = "game"
n_prev_actions_in_inputs = 5  # [restart]
n_zone_centers_in_inputs = 16  # [restart]
one_every_n_zone_centers_in_inputs = 3  # [restart] 16 centers every 15 m: 240 m ahead, 8 s at the AI's speed
margin_to_announce_finish_meters = 300.0  # [restart] cap of the "distance left to finish" input

# ---------------------------------------------------------------------------------------------------
# Zones (virtual checkpoints) along the centerline
# ---------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------
# Zones along the driveline, and the floats
# ---------------------------------------------------------------------------------------------------
distance_between_checkpoints = 5.0  # [restart] the driveline's nodes are 2-15 m long
n_zone_centers_extrapolate_before_start_of_map = 20  # [restart]
n_zone_centers_extrapolate_after_end_of_map = 100  # [restart] at least the look-ahead span (zones)
road_width = 30.0  # zone changes are accepted within ~15 m of the next center (roads are 8-18 m wide)

# ---------------------------------------------------------------------------------------------------
# Race cut-offs
# ---------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------
# Race cut-offs, rewards and the mini-race
# ---------------------------------------------------------------------------------------------------
cutoff_rollout_if_race_not_finished_within_duration_ms = 300_000
cutoff_rollout_if_no_vcp_passed_within_duration_ms = 5_000  # the game's own rescue after a fall takes ~2-3 s

# ---------------------------------------------------------------------------------------------------
# Rewards (step reward = time penalty + progress; shaping is potential-based)
# ---------------------------------------------------------------------------------------------------
constant_reward_per_ms = -1.0 / 1000  # -1 per second of game time
reward_per_m_advanced_along_centerline = 1.0 / 40  # +1 per 40 m: break-even at 40 m/s, above a kart's top speed
shaped_reward_dist_to_cur_vcp = -0.05  # potential: this x clamp(distance to current zone center)
shaped_reward_min_dist_to_cur_vcp = 2.0
shaped_reward_max_dist_to_cur_vcp = 20.0
# The game's own terms. CarRacing: this x the share of the wheels off the road tiles, taken from the reward of
# each step (cutting a corner over the grass misses tiles the native score pays for).
off_road_penalty_per_action = 0.0
# CarRacing: this x each road tile the car touches for the first time in the race (the native score pays for each;
# a tile is ~3.5 m of road, so 0.1 pays ~1.7x what reward_per_m_advanced_along_centerline pays for the same metres).
reward_per_new_road_tile = 0.0  # CarRacing's
# A new tile pays only while the car is at most this many metres behind its own furthest progress along the lap, so
# turning back for tiles missed earlier pays nothing (None: every new tile pays).
road_tile_reward_max_m_behind_furthest = None
# CarRacing: this is taken from the reward for each road tile of the lap the car drives past without touching it (its
# own episode only ends once every tile is touched: a lap that misses one drives on to the 20 s limit).
missed_road_tile_penalty = 0.0  # CarRacing's
# Taken from the reward of the last step of a race the no-progress cut-off ended (a spin that left the car facing back
# down the track, a stall on the grass): such a race is cut 2 s after its last new zone and bootstraps from there, so
# the steps into a spin cost it about one mini-race horizon, where the native rules lose the rest of the lap's clock.
no_progress_penalty = 0.0

# ---------------------------------------------------------------------------------------------------
# Mini-races and n-step returns
# ---------------------------------------------------------------------------------------------------
n_steps = 3  # [restart]
discard_non_greedy_actions_in_nsteps = True
temporal_mini_race_duration_ms = 7_000  # [restart] 70 actions, Linesight's horizon
oversample_long_term_steps = 16
oversample_maximum_term_steps = 4
# (frames played, gamma), linear interpolation.
gamma_schedule = [(0, 0.999), (300_000, 1.0)]

# ---------------------------------------------------------------------------------------------------
# Replay buffers
# ---------------------------------------------------------------------------------------------------
# (frames played, (capacity, transitions needed before learning starts)), staircase; capacities only grow.
memory_size_schedule = [(0, (50_000, 5_000)), (200_000, (100_000, 5_000))]
buffer_test_ratio = 0.05  # share of transitions routed to the hidden test buffer (and of batches run on it)
buffer_test_switch_probability = 0.1  # per step chance to re-draw the train/test destination
number_times_single_memory_is_used_before_discard = 12  # replay ratio: each stored transition is sampled ~12 times
prio_alpha = 0.0  # 0 = uniform replay; > 0 = prioritized replay
prio_beta = 0.4
prio_epsilon = 1e-3

# ---------------------------------------------------------------------------------------------------
# Network (IQN) [restart]
# ---------------------------------------------------------------------------------------------------
conv_layers = [(16, 4, 2), (32, 4, 2), (32, 3, 2)]  # (out channels, kernel, stride)
# The frame's encoder: "linesight" (conv_layers as plain convolutions, each followed by LeakyReLU) or "impala" (IMPALA's
# residual encoder: per conv_layers entry a stage of its channels, 3x3 convolutions, a max-pool and two residual blocks)
network_encoder = "linesight"
float_hidden_dim = 128
dense_hidden_dimension = 256
iqn_embedding_dimension = 64
iqn_n = 8  # quantiles per sample when training (even)
iqn_k = 8  # quantiles per state when acting (even); fixed midpoint fractions, so 8 estimate the mean well
use_jit = True
iqn_kappa = 1.0  # (live) Huber threshold of the quantile loss
use_ddqn = False  # (live) next action chosen by the online network instead of the target network

# ---------------------------------------------------------------------------------------------------
# Optimisation
# ---------------------------------------------------------------------------------------------------
batch_size = 128  # [restart]
# The train step's precision: "float32", "bfloat16" (mixed: the loss, the quantile cosines, the output layers and
# the dueling combine stay float32), or "auto": a start-up probe times the step both ways on this machine and
# keeps bfloat16 only if it is >= 1.1x faster (the log line gives both times).
training_precision = "auto"  # [restart]
# The train step on a CUDA GPU as captured CUDA graphs (one replay instead of hundreds of kernel launches): "on", "off",
# or "auto": a start-up probe times both steps and keeps the graphs only if they are >= 1.1x faster (logged). The CPU
# never uses them ("on" without a CUDA device is refused at start).
training_cuda_graphs = "auto"  # [restart]
# (frames played, lr), exponential interpolation.
lr_schedule = [(0, 1e-3), (300_000, 3e-4), (1_000_000, 1e-4)]
weight_decay_lr_ratio = 1 / 50
adam_epsilon = 1e-4
adam_beta1 = 0.9
adam_beta2 = 0.999
clip_grad_norm = 30.0
clip_grad_value = 1000.0
number_memories_trained_on_between_target_network_updates = 2048
soft_update_tau = 0.05

# ---------------------------------------------------------------------------------------------------
# Exploration: (frames played, value), exponential interpolation
# ---------------------------------------------------------------------------------------------------
epsilon_schedule = [(0, 1.0), (10_000, 0.3), (100_000, 0.05), (500_000, 0.02)]
epsilon_boltzmann_schedule = [(0, 0.15), (500_000, 0.03)]
tau_epsilon_boltzmann = 0.01

# ---------------------------------------------------------------------------------------------------
# Map cycle: (name, seed or range of seeds, is_explo, fill_buffer). A range hands out its seeds in turn.
# Maps that fill the buffer are "trained"; the others are "blind" evaluation tracks.
# ---------------------------------------------------------------------------------------------------
# (map, the race's seed, is_explo, fill_buffer): each map explored 4 times for each greedy race
map_cycle = [('abyss', 0, True, True), ('abyss:reverse', 0, True, True), ('black_forest', 0, True, True), ('black_forest:reverse', 0, True, True), ('candela_city', 0, True, True), ('candela_city:reverse', 0, True, True), ('cocoa_temple', 0, True, True), ('cocoa_temple:reverse', 0, True, True), ('fortmagma', 0, True, True), ('fortmagma:reverse', 0, True, True), ('gran_paradiso_island', 0, True, True), ('gran_paradiso_island:reverse', 0, True, True), ('lighthouse', 0, True, True), ('lighthouse:reverse', 0, True, True), ('mines', 0, True, True), ('mines:reverse', 0, True, True), ('olivermath', 0, True, True), ('olivermath:reverse', 0, True, True), ('ravenbridge_mansion', 0, True, True), ('ravenbridge_mansion:reverse', 0, True, True), ('sandtrack', 0, True, True), ('sandtrack:reverse', 0, True, True), ('scotland', 0, True, True), ('scotland:reverse', 0, True, True), ('snowmountain', 0, True, True), ('snowmountain:reverse', 0, True, True), ('stk_enterprise', 0, True, True), ('stk_enterprise:reverse', 0, True, True), ('volcano_island', 0, True, True), ('volcano_island:reverse', 0, True, True), ('zengarden', 0, True, True), ('zengarden:reverse', 0, True, True), ('abyss', 0, True, True), ('abyss:reverse', 0, True, True), ('black_forest', 0, True, True), ('black_forest:reverse', 0, True, True), ('candela_city', 0, True, True), ('candela_city:reverse', 0, True, True), ('cocoa_temple', 0, True, True), ('cocoa_temple:reverse', 0, True, True), ('fortmagma', 0, True, True), ('fortmagma:reverse', 0, True, True), ('gran_paradiso_island', 0, True, True), ('gran_paradiso_island:reverse', 0, True, True), ('lighthouse', 0, True, True), ('lighthouse:reverse', 0, True, True), ('mines', 0, True, True), ('mines:reverse', 0, True, True), ('olivermath', 0, True, True), ('olivermath:reverse', 0, True, True), ('ravenbridge_mansion', 0, True, True), ('ravenbridge_mansion:reverse', 0, True, True), ('sandtrack', 0, True, True), ('sandtrack:reverse', 0, True, True), ('scotland', 0, True, True), ('scotland:reverse', 0, True, True), ('snowmountain', 0, True, True), ('snowmountain:reverse', 0, True, True), ('stk_enterprise', 0, True, True), ('stk_enterprise:reverse', 0, True, True), ('volcano_island', 0, True, True), ('volcano_island:reverse', 0, True, True), ('zengarden', 0, True, True), ('zengarden:reverse', 0, True, True), ('abyss', 0, True, True), ('abyss:reverse', 0, True, True), ('black_forest', 0, True, True), ('black_forest:reverse', 0, True, True), ('candela_city', 0, True, True), ('candela_city:reverse', 0, True, True), ('cocoa_temple', 0, True, True), ('cocoa_temple:reverse', 0, True, True), ('fortmagma', 0, True, True), ('fortmagma:reverse', 0, True, True), ('gran_paradiso_island', 0, True, True), ('gran_paradiso_island:reverse', 0, True, True), ('lighthouse', 0, True, True), ('lighthouse:reverse', 0, True, True), ('mines', 0, True, True), ('mines:reverse', 0, True, True), ('olivermath', 0, True, True), ('olivermath:reverse', 0, True, True), ('ravenbridge_mansion', 0, True, True), ('ravenbridge_mansion:reverse', 0, True, True), ('sandtrack', 0, True, True), ('sandtrack:reverse', 0, True, True), ('scotland', 0, True, True), ('scotland:reverse', 0, True, True), ('snowmountain', 0, True, True), ('snowmountain:reverse', 0, True, True), ('stk_enterprise', 0, True, True), ('stk_enterprise:reverse', 0, True, True), ('volcano_island', 0, True, True), ('volcano_island:reverse', 0, True, True), ('zengarden', 0, True, True), ('zengarden:reverse', 0, True, True), ('abyss', 0, True, True), ('abyss:reverse', 0, True, True), ('black_forest', 0, True, True), ('black_forest:reverse', 0, True, True), ('candela_city', 0, True, True), ('candela_city:reverse', 0, True, True), ('cocoa_temple', 0, True, True), ('cocoa_temple:reverse', 0, True, True), ('fortmagma', 0, True, True), ('fortmagma:reverse', 0, True, True), ('gran_paradiso_island', 0, True, True), ('gran_paradiso_island:reverse', 0, True, True), ('lighthouse', 0, True, True), ('lighthouse:reverse', 0, True, True), ('mines', 0, True, True), ('mines:reverse', 0, True, True), ('olivermath', 0, True, True), ('olivermath:reverse', 0, True, True), ('ravenbridge_mansion', 0, True, True), ('ravenbridge_mansion:reverse', 0, True, True), ('sandtrack', 0, True, True), ('sandtrack:reverse', 0, True, True), ('scotland', 0, True, True), ('scotland:reverse', 0, True, True), ('snowmountain', 0, True, True), ('snowmountain:reverse', 0, True, True), ('stk_enterprise', 0, True, True), ('stk_enterprise:reverse', 0, True, True), ('volcano_island', 0, True, True), ('volcano_island:reverse', 0, True, True), ('zengarden', 0, True, True), ('zengarden:reverse', 0, True, True), ('abyss', 0, False, True), ('abyss:reverse', 0, False, True), ('black_forest', 0, False, True), ('black_forest:reverse', 0, False, True), ('candela_city', 0, False, True), ('candela_city:reverse', 0, False, True), ('cocoa_temple', 0, False, True), ('cocoa_temple:reverse', 0, False, True), ('fortmagma', 0, False, True), ('fortmagma:reverse', 0, False, True), ('gran_paradiso_island', 0, False, True), ('gran_paradiso_island:reverse', 0, False, True), ('lighthouse', 0, False, True), ('lighthouse:reverse', 0, False, True), ('mines', 0, False, True), ('mines:reverse', 0, False, True), ('olivermath', 0, False, True), ('olivermath:reverse', 0, False, True), ('ravenbridge_mansion', 0, False, True), ('ravenbridge_mansion:reverse', 0, False, True), ('sandtrack', 0, False, True), ('sandtrack:reverse', 0, False, True), ('scotland', 0, False, True), ('scotland:reverse', 0, False, True), ('snowmountain', 0, False, True), ('snowmountain:reverse', 0, False, True), ('stk_enterprise', 0, False, True), ('stk_enterprise:reverse', 0, False, True), ('volcano_island', 0, False, True), ('volcano_island:reverse', 0, False, True), ('zengarden', 0, False, True), ('zengarden:reverse', 0, False, True)]

# Held-out evaluation: every held_out_eval_period_s of training, the learner plays one greedy race on each of
# these tracks (never trained on: the map_cycle must not store them; all below 50,000) and keeps the best weights in
# save/<run>/best/. 100 tracks: a crash in 1 race of 30 is what the pixels-only agent's worst weights had, and 10
# tracks rarely see it (docs/results.md). Its time counts.
held_out_seeds = range(100, 200)
# one greedy lap on each held-out map (4 races: ~1,400 actions once the model finishes, at most 12,000 while it cannot, the
# native time cap; ~900-1,200 actions/s on one core): a few seconds of one core every 5 minutes
held_out_eval_period_s = 300
# What ends the held-out races, and so what the best model is chosen by: "native" (CarRacing-v3's own episode rules,
# those of published scores: every tile touched, or its 20 s time limit) or "training" (the collectors' cut-offs).
held_out_rules = "native"
# A race scoring below this is a lost race (a crash, a spin that runs out the clock): the tail figures count them
# (held-out evaluations, evaluate.py's summaries). None: no such count.
tail_score_bar = None  # a SuperTuxKart race scores 1000 - its time in s: no fixed bar of a lost race
# best/ is the evaluation with the highest held-out mean minus this many points per percent of its races below
# tail_score_bar (10: one lost race in 100 costs 10 points beyond its own share of the mean); 0: the plain mean.
best_tail_penalty = 10.0
# Keep the weights of every held-out evaluation in save/<run>/held-out/minute-MMM/ (~1-2 MB each), so that another
# choice of best/ can be made and checked afterwards.
held_out_keep_weights = True
# The sets a figure is measured on (`python scripts/evaluate.py --seeds validation` or `--seeds test`), each a
# hundred tracks the map_cycle never stores. Validation: where settings and arms are compared (500000-500099 and
# 200000-200099 chose the missed-tile penalty and the pixels arms). Test: the published figures, measured once a
# setting and its weights are chosen, and chosen on nothing (named 2026-12-02, before any run was measured on them).
validation_seeds = [range(500_000, 500_100), range(200_000, 200_100)]
test_seeds = [range(600_000, 600_100), range(700_000, 700_100), range(800_000, 800_100)]
keep_weights_at_minutes = [30, 60, 120, 240]  # the online weights at these minutes of training, kept as save/<run>/at-minute-MMM/

# ---------------------------------------------------------------------------------------------------
# Processes and bookkeeping
# ---------------------------------------------------------------------------------------------------
# The run's seed: the learner's sampling and initial weights, the collectors' exploration and the order of the
# tracks of each range in map_cycle. `--seed N` sets it for a new run; two seeds make two independent runs.
seed = 0  # [restart]
# [restart] local collector processes (0: only a remote source plays), or "auto": the cores the learner does not need
# (a CPU learner keeps half the cores, at least 1 collector; a CUDA learner keeps 2 cores: 14 collectors on 16 cores).
collectors_count = "auto"
max_rollout_queue_size = 1  # [restart]
update_inference_network_every_n_actions = 20
send_shared_network_every_n_batches = 8
# Races played with weights more than this many published versions older than the learner's are not stored
# (counted per source). Local collectors lag a few versions; the bound is for remote sources (Ray, HTTP).
max_policy_lag = 100_000
save_frequency_s = 300
# Complete checkpoints kept in save/<run>/checkpoints/ (the newest ones; older ones are deleted after each save).
checkpoints_kept = 2
collector_stall_timeout_s = 120  # a collector silent this long is restarted
# Pacing: when the learner owes more than this many batches to its replay ratio, the rollout sources start no
# new race (races in flight still arrive) until it has caught up to half of it.
max_training_backlog_batches = 400

# ---------------------------------------------------------------------------------------------------
# A learner group (scripts/train.py --learners N > 1: N data-parallel learners, docs/cluster.md)
# ---------------------------------------------------------------------------------------------------
# A step of N learners learns from N x batch_size transitions; its lr is the schedule's x 1 ("none"), x sqrt(N)
# ("sqrt") or x N ("linear"). One learner: no effect.
learners_lr_scaling = "sqrt"
learner_group_timeout_s = 120  # [restart] a rank that does not answer a collective this long stops the run (exit 1)
# [restart] How the ranks' gradients are averaged in each step: "overlap" (in buckets, each all_reduce started while
# backward goes on) or "after_backward" (one all_reduce once backward has finished). docs/cluster.md says what each costs.
learners_gradient_exchange = "overlap"

# ---------------------------------------------------------------------------------------------------
# Remote rollout sources (optional installs; off by default). collectors_count may be 0 when one is on.
# ---------------------------------------------------------------------------------------------------
ray_address = None  # [restart] "auto": a local Ray cluster on loopback; or a cluster's address (docs/cluster.md)
ray_actors = 0  # [restart] collector actors on the Ray cluster
# (more Ray settings here)
ray_object_store_mb = 512  # [restart] object store of the cluster `ray_address = "auto"` starts
http_listen = None  # [restart] "127.0.0.1:8642": serve external game clients (docs/http-api.md)
# (more HTTP settings here)
http_queue_size = 8  # [restart] races received and not yet taken by the learner; a client meeting a full queue gets 429
# Clients are told to pause (`paused` in /v1/status and in each 202) while more races than this wait in the queue:
# their races would be played with weights that many races older by the time the learner takes them.
http_off_policy_tolerance = 2
http_heartbeat_interval_s = 5.0  # how often a client says it is alive between races (given to it at registration)
http_client_timeout_s = 60.0  # a client silent this long is forgotten (it registers again)

# ---------------------------------------------------------------------------------------------------
# SuperTuxKart (game_backend = "supertuxkart"; config_files/supertuxkart.py sets these; docs/config.md §2.15)
# ---------------------------------------------------------------------------------------------------
supertuxkart_kart = "tux"  # [restart]
supertuxkart_difficulty = 3  # [restart] it scales every kart, ours too: 3 is the fastest, the AI's anchor times are there
supertuxkart_laps = 1  # [restart]
supertuxkart_view_m = 80.0  # [restart] road across the frame's width: 60 m ahead of the kart, 20 m behind
# native rules (held-out and evaluate.py races): a race not finished after this much game time ends (the game's AI
# takes 18-97 s a lap at difficulty 3; a kart stuck on a wall would hang an evaluation)
supertuxkart_native_time_cap_ms = 300_000
# ---------------------------------------------------------------------------------------------------
# Maps: "track" or "track:reverse". Training: 16 tracks in both directions. Never trained, in either direction (the
# check at start refuses a run that trains on one, puts a track in both roles, or has fewer than 4 of them): 2 held-out
# tracks, on which best/ is chosen, and 3 test tracks, which carry the published figure and choose nothing (evaluate.py
# --tracks test). The held-out ones are the shortest laps (the game's AI at difficulty 3: minigolf 30.5 / 32.7 s,
# hacienda 39.9 / 41.3 s reversed), so that an evaluation stays cheap.
# ---------------------------------------------------------------------------------------------------
supertuxkart_held_out_tracks = [name + direction for name in ("hacienda", "minigolf") for direction in ("", ":reverse")]
supertuxkart_test_tracks = [name + direction for name in ("cornfield_crossing", "snowtuxpeak", "xr591") for direction in ("", ":reverse")]  # maps neither trained on nor held out, in either direction: the published figure

seed = 0  # [restart] set by --seed when the run started
