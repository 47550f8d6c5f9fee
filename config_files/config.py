"""Run settings.

`scripts/train.py` copies this file to the run's live config, save/<run>/config_live.py, when a run starts;
the running processes reload that file, so a live run can be tuned by editing it while this file is kept
for the next runs.
Every setting is checked by `trackmania_rl/config/schema.py`; settings marked [restart] cannot change in
a live run (an edit of the copy is reported and not applied; put it in this file for the next start).
docs/config.md explains each.
Units: ms of game time, "m" are game distance units (Box2D units for CarRacing), frames = actions played.
"""

# ---------------------------------------------------------------------------------------------------
# Game time and images
# ---------------------------------------------------------------------------------------------------
# [restart] Physics steps one action is held for. CarRacing runs 50 physics steps per game second,
# so 4 steps = 80 ms per action (12.5 decisions per second).
physics_steps_per_action = 4
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
action_set = None  # [restart] None: config_files/inputs_list.py's actions; or names such as "accelerate+left"
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
n_zone_centers_in_inputs = 16  # [restart] zone centers ahead given to the network
one_every_n_zone_centers_in_inputs = 4  # [restart] stride between those centers (4 x 3.5 = 14 m)
margin_to_announce_finish_meters = 300.0  # [restart] cap of the "distance left to finish" input

# ---------------------------------------------------------------------------------------------------
# Zones (virtual checkpoints) along the centerline
# ---------------------------------------------------------------------------------------------------
distance_between_checkpoints = 3.5  # [restart] CarRacing's own track points are 3.5 apart
n_zone_centers_extrapolate_before_start_of_map = 20  # [restart]
n_zone_centers_extrapolate_after_end_of_map = 100  # [restart] at least the look-ahead span (zones)
road_width = 40.0  # zone changes are only accepted within ~half this distance of the next center

# ---------------------------------------------------------------------------------------------------
# Race cut-offs
# ---------------------------------------------------------------------------------------------------
cutoff_rollout_if_race_not_finished_within_duration_ms = 60_000
cutoff_rollout_if_no_vcp_passed_within_duration_ms = 2_000

# ---------------------------------------------------------------------------------------------------
# Rewards (step reward = time penalty + progress; shaping is potential-based)
# ---------------------------------------------------------------------------------------------------
constant_reward_per_ms = -1.0 / 1000  # -1 per second of game time
reward_per_m_advanced_along_centerline = 1.0 / 60  # +1 per 60 m: break-even at 60 m/s
shaped_reward_dist_to_cur_vcp = -0.05  # potential: this x clamp(distance to current zone center)
shaped_reward_min_dist_to_cur_vcp = 2.0
shaped_reward_max_dist_to_cur_vcp = 20.0
# The game's own terms. CarRacing: this x the share of the wheels off the road tiles, taken from the reward of
# each step (cutting a corner over the grass misses tiles the native score pays for).
off_road_penalty_per_action = 0.0
# CarRacing: this x each road tile the car touches for the first time in the race (the native score pays for each;
# a tile is ~3.5 m of road, so 0.1 pays ~1.7x what reward_per_m_advanced_along_centerline pays for the same metres).
reward_per_new_road_tile = 0.1
# A new tile pays only while the car is at most this many metres behind its own furthest progress along the lap, so
# turning back for tiles missed earlier pays nothing (None: every new tile pays).
road_tile_reward_max_m_behind_furthest = None
# CarRacing: this is taken from the reward for each road tile of the lap the car drives past without touching it (its
# own episode only ends once every tile is touched: a lap that misses one drives on to the 20 s limit).
missed_road_tile_penalty = 2.0
# Taken from the reward of the last step of a race the no-progress cut-off ended (a spin that left the car facing back
# down the track, a stall on the grass): such a race is cut 2 s after its last new zone and bootstraps from there, so
# the steps into a spin cost it about one mini-race horizon, where the native rules lose the rest of the lap's clock.
no_progress_penalty = 0.0

# ---------------------------------------------------------------------------------------------------
# Mini-races and n-step returns
# ---------------------------------------------------------------------------------------------------
n_steps = 3  # [restart]
discard_non_greedy_actions_in_nsteps = True
temporal_mini_race_duration_ms = 4_000  # [restart] horizon H = this // ms_per_action actions (>= n_steps)
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
map_cycle = [("train", range(1_000, 50_000), True, True)] * 4 + [
    ("train", range(1_000, 50_000), False, True),
    ("blind", range(0, 10), False, False),
]

# Held-out evaluation: every held_out_eval_period_s of training, the learner plays one greedy race on each of
# these tracks (never trained on: the map_cycle must not store them; all below 50,000) and keeps the best weights in
# save/<run>/best/. 100 tracks: a crash in 1 race of 30 is what the pixels-only agent's worst weights had, and 10
# tracks rarely see it (docs/results.md). Its time counts.
held_out_seeds = range(100, 200)
held_out_eval_period_s = 300  # 0: off
# What ends the held-out races, and so what the best model is chosen by: "native" (CarRacing-v3's own episode rules,
# those of published scores: every tile touched, or its 20 s time limit) or "training" (the collectors' cut-offs).
held_out_rules = "native"
# A race scoring below this is a lost race (a crash, a spin that runs out the clock): the tail figures count them
# (held-out evaluations, evaluate.py's summaries). None: no such count.
tail_score_bar = 800.0
# best/ is the evaluation with the highest held-out mean minus this many points per percent of its races below
# tail_score_bar (10: one lost race in 100 costs 10 points beyond its own share of the mean); 0: the plain mean.
best_tail_penalty = 10.0
# Keep the weights of every held-out evaluation in save/<run>/held-out/minute-MMM/ (~1-2 MB each), so that another
# choice of best/ can be made and checked afterwards.
held_out_keep_weights = True
# The sets a figure is measured on (`python scripts/evaluate.py --seeds validation` or `--seeds test`), each a
# hundred tracks the map_cycle never stores. Validation: where settings, arms and weights are compared (500000-500099
# and 200000-200099 chose the missed-tile penalty and the pixels arms; 300000-, 400000- and 900000-900099 added on
# 2026-12-02 because 200 races cannot tell apart agents that lose 1-2 % of them). Test: the published figures,
# measured once a setting and its weights are chosen, and chosen on nothing (named 2026-12-02, before any run was
# measured on them).
validation_seeds = [range(s, s + 100) for s in (500_000, 200_000, 300_000, 400_000, 900_000)]
test_seeds = [range(600_000, 600_100), range(700_000, 700_100), range(800_000, 800_100)]
keep_weights_at_minutes = [30]  # the online weights at these minutes of training, kept as save/<run>/at-minute-MMM/

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
supertuxkart_difficulty = 3  # [restart] 0-3: it scales every kart, ours too
supertuxkart_laps = 1  # [restart]
supertuxkart_view_m = 80.0  # [restart] metres of road across the frame's width
supertuxkart_native_time_cap_ms = 300_000  # native rules: a race not finished after this much game time ends
supertuxkart_held_out_tracks = []  # maps no map_cycle entry trains on, in either direction: best/ is chosen on them
supertuxkart_test_tracks = []  # maps neither trained on nor held out, in either direction: the published figure
