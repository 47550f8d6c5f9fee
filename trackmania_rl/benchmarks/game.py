"""Game figures (DESIGN §5): how close a collector's `rollout()` runs to the bare game.

- `game.bare_steps_per_s`: the game alone, actions per second of wall time: reset, then per action one
  render and `physics_steps_per_action` physics steps, through the same env class (one render per
  action) as the rollout, replaying the very actions the rollout played on the same seed, so both do
  the same physics and draw the same scenes;
- `game.rollout_steps_per_s`: a full `CarRacingGameInstance.rollout()` with a policy of the default
  network size on CPU (one thread, batch 1, iqn_k quantiles per action);
- `game.collector_efficiency`: their ratio (target >= 0.90).
Also `game.collector_efficiency_without_network` (the same rollout with the hand-written centerline
follower deciding and no network: the game side's own overhead) and the rollout's per-stage timings
(`game.rollout_ns_per_action.<stage>`). Each repetition measures all back to back, in rotated order;
figures are medians over repetitions of wall-clock rates; the efficiency lines also give the ratio from
the process's CPU time (`cpu_time_ratio`), which other processes on a shared machine disturb less.

The policy network is a stand-in with the default config sizes (see `make_policy`); switch it to the
real inference network of trackmania_rl/agents/iqn.py once that exists.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from trackmania_rl.config_loader import default_config
from trackmania_rl.games.base import MapSpec
from trackmania_rl.games.car_racing import CarRacingGameInstance, centerline_follower

SEEDS = (0, 1, 2, 3)
STAGES = ("reset", "physics", "render", "convert_frame", "exploration_policy", "update_network", "bookkeeping")


class _StandInIQN(nn.Module):
    """Linesight's IQN shape at the config's sizes: conv image head + float MLP, cosine quantile
    embedding multiplying the joint features, dueling advantage / value heads."""

    def __init__(self, cfg, layout, n_actions: int):
        super().__init__()
        float_dim = layout.dim
        self.register_buffer("float_mean", torch.from_numpy(layout.mean))
        self.register_buffer("float_std", torch.from_numpy(layout.std))
        layers, channels = [], 1
        for out_channels, kernel, stride in cfg.conv_layers:
            layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.LeakyReLU()]
            channels = out_channels
        self.img_head = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            conv_out = self.img_head(torch.zeros(1, 1, cfg.H_downsized, cfg.W_downsized)).shape[1]
        hidden = cfg.float_hidden_dim
        self.float_head = nn.Sequential(nn.Linear(float_dim, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden), nn.LeakyReLU())
        joint = conv_out + hidden
        self.iqn_fc = nn.Sequential(nn.Linear(cfg.iqn_embedding_dimension, joint), nn.LeakyReLU())
        half = cfg.dense_hidden_dimension // 2
        self.advantage = nn.Sequential(nn.Linear(joint, half), nn.LeakyReLU(), nn.Linear(half, n_actions))
        self.value = nn.Sequential(nn.Linear(joint, half), nn.LeakyReLU(), nn.Linear(half, 1))
        self.register_buffer("cos_freqs", torch.arange(1, cfg.iqn_embedding_dimension + 1, dtype=torch.float32) * torch.pi)

    def forward(self, frames: torch.Tensor, floats: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """frames uint8 (B, 1, H, W), raw floats (B, D), tau (B, K) -> quantile values (B, K, n_actions)."""
        floats = (floats - self.float_mean) / self.float_std
        features = torch.cat([self.img_head((frames.float() - 128.0) / 128.0), self.float_head(floats)], dim=1)
        features = features.unsqueeze(1) * self.iqn_fc(torch.cos(tau.unsqueeze(-1) * self.cos_freqs))
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=-1, keepdim=True)


def make_policy(cfg, layout, n_actions: int, choose_action=None):
    """An exploration policy that runs a network of the default size at batch 1 per action on one CPU
    thread and returns its q-values (mean over iqn_k midpoint quantiles). The action is the greedy one,
    or `choose_action(frame, state_float)[0]` when given (the benchmark drives with the centerline
    follower so that the car drives along the track, while paying for the network).

    With cfg.use_jit the network is TorchScript-compiled but not frozen: a collector refreshes its
    weights in place every few actions, which a frozen module (weights baked in) would not see.
    Stand-in for the real inference network (trackmania_rl/agents): switch to it once it exists."""
    torch.set_num_threads(1)
    network = _StandInIQN(cfg, layout, n_actions).eval()
    tau = ((torch.arange(cfg.iqn_k, dtype=torch.float32) + 0.5) / cfg.iqn_k)[None]  # (1, K) midpoints
    if cfg.use_jit:
        network = torch.jit.script(network)

    def policy(frame, state_float):
        with torch.inference_mode():
            quantiles = network(torch.from_numpy(frame)[None], torch.from_numpy(state_float)[None], tau)
            q_values = quantiles[0].mean(dim=0).numpy()
        greedy = int(q_values.argmax())
        action = greedy if choose_action is None else int(choose_action(frame, state_float)[0])
        return action, action == greedy, float(q_values[greedy]), q_values

    return policy


def play_bare(game: CarRacingGameInstance, seed: int, actions) -> None:
    """The game alone playing `actions` on `seed`: reset, then per action one render and the physics
    steps of one action, through the rollout's own env."""
    env, controls, steps = game.env, game.controls, game.cfg.physics_steps_per_action
    env.reset(seed=seed)
    for action in actions:
        env.render_state_pixels()
        control = controls[action]
        for _ in range(steps):
            env.step(control)


def timed(play) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of play()."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = play()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def run(args):
    quick = getattr(args, "quick", False)
    # Many short races (cut off after race_ms of game time) rather than a few laps: on a machine
    # shared with other work, medians over many short paired runs are steadier than over a few long.
    race_ms, repetitions = (5_000, 4) if quick else (10_000, 12)
    cfg = default_config().replace(cutoff_rollout_if_race_not_finished_within_duration_ms=race_ms)
    game = CarRacingGameInstance(cfg)
    layout = game.float_layout
    follower = centerline_follower(cfg, layout)
    network_policy = make_policy(cfg, layout, len(cfg.inputs), choose_action=follower)

    def update_network():  # weight copies belong to the collector's figures, not the game's
        pass

    # An untimed rollout per seed records the actions the bare game replays (the policies are
    # deterministic and drive alike, so every timed rollout of that seed plays them again); it also
    # warms up.
    maps, recorded = {}, {}
    for seed in SEEDS:
        maps[seed] = MapSpec(f"seed{seed}", seed)
        results, _ = game.rollout(network_policy, maps[seed], game.zone_centers_for(maps[seed]), update_network)
        recorded[seed] = results["actions"]

    def rollout(policy, seed):
        results, stats = game.rollout(policy, maps[seed], game.zone_centers_for(maps[seed]), update_network)
        if results["actions"] != recorded[seed]:
            raise RuntimeError("a benchmark rollout did not replay its recorded actions: the game is not deterministic")
        return stats

    # three ways to play the same race; each repetition runs them back to back in a rotated order so
    # that drifts in machine load hit all alike
    contenders = {
        "bare": lambda seed: play_bare(game, seed, recorded[seed]),
        "rollout": lambda seed: rollout(network_policy, seed),
        "rollout_without_network": lambda seed: rollout(follower, seed),
    }
    wall_rates = {name: [] for name in contenders}
    cpu_rates = {name: [] for name in contenders}
    stage_ns = {s: [] for s in STAGES}
    names = list(contenders)
    for rep in range(repetitions):
        seed = SEEDS[rep % len(SEEDS)]
        for name in names[rep % 3 :] + names[: rep % 3]:
            wall, cpu, stats = timed(lambda: contenders[name](seed))
            wall_rates[name].append(len(recorded[seed]) / wall)
            cpu_rates[name].append(len(recorded[seed]) / cpu)
            if name == "rollout":
                for stage in STAGES:
                    stage_ns[stage].append(stats[f"instrumentation__{stage}"])
    game.close()

    median = {name: statistics.median(values) for name, values in wall_rates.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu_rates.items()}
    common = {
        "repetitions": repetitions,
        "physics_steps_per_action": cfg.physics_steps_per_action,
        "race_ms": race_ms,
        "actions_per_race": {seed: len(actions) for seed, actions in recorded.items()},
    }
    yield {
        "figure": "game.bare_steps_per_s",
        "value": round(median["bare"], 2),
        "unit": "actions/s",
        "samples": [round(r, 2) for r in wall_rates["bare"]],
        **common,
    }
    yield {
        "figure": "game.rollout_steps_per_s",
        "value": round(median["rollout"], 2),
        "unit": "actions/s",
        "samples": [round(r, 2) for r in wall_rates["rollout"]],
        "policy": "stand-in IQN of the default config sizes, 1 CPU thread, batch 1" + (", TorchScript" if cfg.use_jit else ", eager"),
        **common,
    }
    for figure, name, extra in (
        ("game.collector_efficiency", "rollout", {"target": ">= 0.90"}),
        # the same without the network (the hand-written follower decides): the game side's own overhead
        ("game.collector_efficiency_without_network", "rollout_without_network", {}),
    ):
        paired = [r / b for r, b in zip(wall_rates[name], wall_rates["bare"])]
        yield {
            "figure": figure,
            "value": round(median[name] / median["bare"], 4),
            "unit": "ratio",
            **extra,
            "median_of_paired_ratios": round(statistics.median(paired), 4),
            "per_repetition": [round(r, 4) for r in paired],
            # the same from this process's CPU time: insensitive to other processes taking the CPU
            "cpu_time_ratio": round(cpu_median[name] / cpu_median["bare"], 4),
        }
    for stage in STAGES:
        yield {"figure": f"game.rollout_ns_per_action.{stage}", "value": round(statistics.median(stage_ns[stage])), "unit": "ns/action"}
