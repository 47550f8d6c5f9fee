"""The peer trainer of issue 66: sb3-contrib's QR-DQN on Atari Enduro with RL Zoo's published Atari hyperparameters,
stopped by wall time. Run it with its own environment (requirements.txt, README.md), not this project's:

    /work/peer_venv/bin/python scripts/peers/sb3_qrdqn/train.py --seed 0 --minutes 60 --out save/peer_qrdqn_seed0

The game, as this project plays it (config_files/enduro.py, trackmania_rl/games/gymnasium/instance.py): ALE/Enduro-v5,
its minimal action set of 9, sticky actions 0.25 (`repeat_action_probability`, applied by the emulator at every
frame), the 108,000-frame cap (`max_num_frames_per_episode`), 4 emulator frames an action. Of the two ways to get the
4 frames, this takes the env's frameskip 1 under AtariWrapper's own 4-frame skip (MaxAndSkipEnv): that is the pipeline
RL Zoo's Atari hyperparameters were published for (AtariWrapper on a no-frameskip env, the screen max-pooled over the
last 2 frames of each action), while the game is the same: ale-py's v5 skip calls the emulator 4 times with the same
action, as MaxAndSkipEnv does, and sticky actions act per frame either way. (The v5 default, frameskip 4, under
AtariWrapper would play 16 frames an action, which is what RL Zoo does with "ALE/Enduro-v5" left as registered.)

The wrappers, innermost first: the env; SB3's Monitor (before any clipping: monitor.csv holds the game's own score, and
its episode length counts emulator frames, the no-op and FIRE starts included); AtariWrapper with its defaults, as
RL Zoo applies it (noop_max 30 random no-op frames at reset, frame_skip 4, 84 x 84 grey by OpenCV INTER_AREA,
terminal_on_life_loss True: Enduro has no lives, so it never acts; FireResetEnv, which AtariWrapper adds for any game
with FIRE, presses FIRE then RIGHT at reset; clip_reward True: sign of the reward; action_repeat_probability 0: the
emulator's stickiness is the one used); then VecFrameStack of 4 (zeros before an episode's first frame), one env.

The hyperparameters (HYPERPARAMS below): hyperparams/qrdqn.yml's `atari` block of DLR-RM/rl-baselines3-zoo, the
rest sb3-contrib QRDQN's defaults of the pinned version (README.md lists each value and where it was read). RL Zoo's
train.py would also evaluate 5 episodes every 25,000 steps on a second env (its --eval-freq default); that is the zoo's
harness, not the agent's settings, and is left out: the whole wall time goes to training.

Outputs under --out: episodes.jsonl (one line per ended training episode: the score
unclipped, its frames, the actions and frames so far, wall time, epsilon), monitor.csv (SB3's own), run.json (the
settings, package versions, CPU, threads, replay memory, and at the end the totals), model_<M>min.zip at each
--checkpoint-minutes mark, model.zip at the stop. What it prints (its log lines, SB3's tables every 4 episodes) goes to
stdout: README.md's commands keep it as train.log beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from importlib import metadata
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import QRDQN
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

ENV_ID = "ALE/Enduro-v5"
# ALE/Enduro-v5's own values, named: sticky actions 0.25, the 108,000-frame cap, the minimal action set; frameskip 1
# because AtariWrapper skips the frames (module docstring)
ENV_KWARGS = dict(frameskip=1, repeat_action_probability=0.25, max_num_frames_per_episode=108_000, full_action_space=False)
FRAME_STACK = 4
# hyperparams/qrdqn.yml, `atari` (DLR-RM/rl-baselines3-zoo at its newest, 2026-04; this block unchanged since 2024-01
# but for the file's new `default` entry): n_timesteps 1e7, learning_starts 50000, exploration_fraction 0.025
# ("explore 250k steps = 10M * 0.025"), optimize_memory_usage False ("If True, you need to deactivate
# handle_timeout_termination in the replay_buffer_kwargs"). Taken here: optimize_memory_usage True, the block's value
# until 2022-07 and the one issue 66 names, with handle_timeout_termination False as that comment says: with False a
# transition takes 56 KB (the observation and the next one), 22.6 GB for 400,000 actions (README.md).
N_TIMESTEPS = 10_000_000
HYPERPARAMS = dict(
    learning_starts=50_000,
    exploration_fraction=0.025,
    optimize_memory_usage=True,
    replay_buffer_kwargs=dict(handle_timeout_termination=False),
)
PUBLISHED_BUFFER = 1_000_000  # QRDQN's default buffer_size; the zoo's block leaves it
RESERVE_BYTES = 3_000_000_000  # kept free beside the replay for the process and the system, for --buffer-size auto
PACKAGES = ("sb3-contrib", "stable-baselines3", "torch", "gymnasium", "ale-py", "numpy", "opencv-python-headless", "psutil")


def make_atari_env(out: Path | None, env_kwargs: dict) -> VecFrameStack:
    """The training env, wrapped as the module docstring says; seeded by the algorithm (QRDQN(seed=...))."""
    gym.register_envs(ale_py)

    def make() -> gym.Env:
        env = gym.make(ENV_ID, **env_kwargs)
        env = Monitor(env, str(out / "monitor.csv") if out else None)
        return AtariWrapper(env)  # noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=True, clip_reward=True

    return VecFrameStack(DummyVecEnv([make]), n_stack=FRAME_STACK)


def cpu_model() -> str:
    """The CPU's name, family and model from /proc/cpuinfo (AMD EPYC (family 25 model 17): a Zen 4)."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown"
    return f"{fields.get('model name', 'unknown')} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def meminfo_bytes(key: str) -> int | None:
    """A /proc/meminfo value (kB) in bytes, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def replay_bytes(buffer) -> tuple[int, int]:
    """(bytes per transition, bytes for the whole buffer) of the replay's arrays (numpy allocates them untouched:
    the memory used grows with the transitions stored, up to the whole)."""
    arrays = [v for v in vars(buffer).values() if isinstance(v, np.ndarray)]
    total = sum(a.nbytes for a in arrays)
    return total // buffer.buffer_size, total


class WallClock(BaseCallback):
    """Stops the training at --minutes of wall time (or when the memory available falls below --min-free-gb), saves
    the model at each checkpoint minute, writes a line per ended episode and a progress line every minute."""

    def __init__(self, args, out: Path, t0: float, per_transition: int):
        super().__init__()
        self.args, self.out, self.t0, self.per_transition = args, out, t0, per_transition
        self.marks = sorted(m for m in args.checkpoint_minutes if m <= args.minutes)
        self.episodes = open(out / "episodes.jsonl", "a", buffering=1)
        self.frames = 0  # emulator frames of the ended episodes
        self.returns: list[float] = []
        self.next_report = 60.0
        self.stop_reason = None

    def _on_step(self) -> bool:
        wall = time.monotonic() - self.t0
        for info in self.locals["infos"]:
            if "episode" in info:  # Monitor's: r the game's score, l the episode's frames
                self.frames += int(info["episode"]["l"])
                self.returns.append(float(info["episode"]["r"]))
                line = dict(
                    episode=len(self.returns),
                    score=self.returns[-1],
                    frames=int(info["episode"]["l"]),
                    frames_total=self.frames,
                    actions_total=int(self.num_timesteps),
                    wall_s=round(wall, 2),
                    epsilon=round(float(self.model.exploration_rate), 5),
                )
                self.episodes.write(json.dumps(line) + "\n")
        while self.marks and wall >= self.marks[0] * 60:
            self.save(f"model_{self.marks.pop(0):g}min.zip", wall)
        if wall >= self.next_report:
            self.next_report += 60.0
            self.report(wall)
        if wall >= self.args.minutes * 60:
            self.stop_reason = "wall time"
        if self.num_timesteps % 1000 == 0:
            free = meminfo_bytes("MemAvailable")
            if free is not None and free < self.args.min_free_gb * 1e9:
                self.stop_reason = f"memory: {free / 1e9:.2f} GB available, below --min-free-gb {self.args.min_free_gb}"
        return self.stop_reason is None

    def save(self, name: str, wall: float) -> None:
        self.model.save(self.out / name)
        log(f"saved {name} at {wall / 60:.2f} min, {self.num_timesteps} actions")

    def report(self, wall: float) -> None:
        last = self.returns[-10:]
        stored = min(self.num_timesteps, self.model.replay_buffer.buffer_size)
        rss, free = rss_bytes(), meminfo_bytes("MemAvailable")
        log(
            f"{wall / 60:6.2f} min: {self.num_timesteps} actions, {len(self.returns)} episodes ({self.frames} frames ended), "
            f"epsilon {self.model.exploration_rate:.4f}, last {len(last)} episodes' mean {np.mean(last) if last else float('nan'):.1f}; "
            f"replay {stored} transitions = {stored * self.per_transition / 1e9:.2f} GB, process RSS "
            f"{(rss or 0) / 1e9:.2f} GB, available {(free or 0) / 1e9:.2f} GB"
        )


def log(message: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--minutes", type=float, required=True, help="wall time of the training, from the first env step")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the outputs, without a run in it (train.log may be there)")
    parser.add_argument("--checkpoint-minutes", type=lambda s: [float(m) for m in s.split(",") if m], default=[15, 30, 45, 60])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, as RL Zoo's --num-threads -1)")
    parser.add_argument(
        "--buffer-size",
        default="auto",
        help="replay transitions: a number, or auto (the default): QRDQN's 1,000,000, or fewer where the memory available "
        "(less 3 GB) holds fewer; a buffer the run never fills learns as the 1,000,000 would",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="smoke test only, not the peer: episodes cut at 2,000 frames, learning from 500 actions, a replay of 10,000",
    )
    parser.add_argument("--min-free-gb", type=float, default=1.0, help="save and stop when less memory than this is available")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if any((out / name).exists() for name in ("run.json", "monitor.csv", "episodes.jsonl")):
        parser.error(f"--out {out} holds a run already")
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    env_kwargs, hyperparams = dict(ENV_KWARGS), dict(HYPERPARAMS)
    if args.debug:
        env_kwargs["max_num_frames_per_episode"] = 2_000
        hyperparams["learning_starts"] = 500
        args.buffer_size = "10000"
    env = make_atari_env(out, env_kwargs)
    if args.buffer_size == "auto":
        # the replay's arrays a transition (optimize_memory_usage: one 4 x 84 x 84 uint8 observation), int64 action,
        # float32 reward, done, timeout); numpy asks for each array whole, and Linux refuses one larger than its memory
        per = FRAME_STACK * 84 * 84 + 8 + 3 * 4
        free = meminfo_bytes("MemAvailable") or 0
        buffer_size = max(min(PUBLISHED_BUFFER, (free - RESERVE_BYTES) // per), 100_000)
    else:
        buffer_size = int(args.buffer_size)
    model = QRDQN("CnnPolicy", env, buffer_size=buffer_size, seed=args.seed, device="cpu", verbose=1, **hyperparams)
    per_transition, replay_total = replay_bytes(model.replay_buffer)
    run = dict(
        argv=sys.argv,
        debug=args.debug,
        env_id=ENV_ID,
        env_kwargs=env_kwargs,
        atari_wrapper="AtariWrapper defaults: noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=True, clip_reward=True",
        frame_stack=FRAME_STACK,
        n_timesteps=N_TIMESTEPS,
        hyperparams={
            k: getattr(model, k)
            for k in (
                "learning_rate",
                "buffer_size",
                "learning_starts",
                "batch_size",
                "tau",
                "gamma",
                "gradient_steps",
                "optimize_memory_usage",
                "n_steps",
                "target_update_interval",
                "exploration_fraction",
                "exploration_initial_eps",
                "exploration_final_eps",
                "max_grad_norm",
            )
        },
        train_freq=str(model.train_freq),
        policy=dict(
            n_quantiles=model.policy.n_quantiles,
            net_arch=model.policy.net_arch,
            features_extractor=type(model.policy.quantile_net.features_extractor).__name__,
            optimizer=repr(model.policy.optimizer.defaults),
        ),
        replay=dict(
            transitions=model.replay_buffer.buffer_size,
            bytes_per_transition=per_transition,
            bytes_whole=replay_total,
            arrays={k: [list(v.shape), str(v.dtype)] for k, v in vars(model.replay_buffer).items() if isinstance(v, np.ndarray)},
        ),
        cpu=cpu_model(),
        cpu_count=os.cpu_count(),
        affinity=len(os.sched_getaffinity(0)),
        torch_threads=torch.get_num_threads(),
        mem_total_bytes=meminfo_bytes("MemTotal"),
        mem_available_bytes=meminfo_bytes("MemAvailable"),
        python=platform.python_version(),
        packages={p: metadata.version(p) for p in PACKAGES},
    )
    debug = "DEBUG (not the peer): " if args.debug else ""
    log(
        f"{debug}QR-DQN on {ENV_ID} {env_kwargs} + AtariWrapper (4-frame skip), {FRAME_STACK} stacked; seed {args.seed}, {args.minutes} min"
    )
    log(f"hyperparameters: {run['hyperparams']}, train_freq {run['train_freq']}, n_timesteps {N_TIMESTEPS:.0e}, policy {run['policy']}")
    log(
        f"replay: {per_transition:,} B a transition (optimize_memory_usage: one {FRAME_STACK} x 84 x 84 uint8 observation), "
        f"{replay_total / 1e9:.2f} GB for its {model.replay_buffer.buffer_size:,} transitions (--buffer-size {args.buffer_size}; "
        f"QRDQN's default {PUBLISHED_BUFFER:,}), used as they are stored"
    )
    log(f"CPU {run['cpu']}, {run['affinity']} cores usable, torch threads {run['torch_threads']}; packages {run['packages']}")
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")

    t0 = time.monotonic()
    clock = WallClock(args, out, t0, per_transition)
    # total_timesteps 1e7 keeps the published exploration schedule (epsilon 1 -> 0.01 over the first 250,000 actions);
    # the wall clock stops the training long before
    model.learn(total_timesteps=N_TIMESTEPS, callback=clock, log_interval=4)
    wall = time.monotonic() - t0
    clock.save("model.zip", wall)
    clock.report(wall)
    run.update(
        stop_reason=clock.stop_reason or "n_timesteps",
        wall_s=round(wall, 1),
        actions=int(model.num_timesteps),
        frames_ended_episodes=clock.frames,
        episodes=len(clock.returns),
        replay_wrapped=bool(model.replay_buffer.full),
        max_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    log(f"stopped ({run['stop_reason']}) after {wall / 60:.2f} min: {model.num_timesteps} actions, {len(clock.returns)} episodes")
    if model.replay_buffer.full:
        log(f"the replay wrapped: its {buffer_size:,} transitions held fewer than the run's actions (QRDQN's default: 1,000,000)")
    else:
        log(f"the replay never wrapped ({model.num_timesteps:,} of {buffer_size:,}): the run learned as with any larger buffer")
    clock.episodes.close()
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
