"""Greedy evaluation of a model saved by train.py, by this project's Enduro protocol (scripts/evaluate.py --rules
native with config_files/enduro.py):

    /work/peer_venv/bin/python scripts/peers/sb3_qrdqn/evaluate.py --model save/peer_qrdqn_seed0/model.zip --seeds 600000-600029

One whole episode per seed, each started by `reset(seed=seed)` of the env (the same ALE seed as ours: the emulator's
start and its sticky-action draws), no no-op starts, sticky actions 0.25, ended only by the game (terminated: the
day's quota missed) or by the 108,000-frame cap (truncated); greedy actions (`deterministic=True`: the action of the
highest mean quantile), no epsilon. Prints one JSON line per episode (seed, score: the game's own unclipped,
frames: emulator frames of the episode, actions, game_time_s: frames / 60, end) and a summary line (mean, std, min,
median, max).

The env is the training one without its training-only parts: ALE/Enduro-v5 with frameskip 1 under AtariWrapper
(noop_max 0, the 4-frame skip with the screen max-pooled over the last 2 frames, 84 x 84 grey, terminal_on_life_loss
False, clip_reward False), and the 4 frames stacked as SB3's VecFrameStack does (zeros before the first frame).

Where the two protocols can still differ:
- the start: AtariWrapper's FireResetEnv (applied to any game with FIRE) plays FIRE then RIGHT, 8 frames, at every
  reset before the agent's first action, as in the peer's training; our agent acts from the first frame;
- the frames before the first: zeros here (as the peer trained), the first frame repeated in ours;
- what each sees: the max of an action's last 2 frames here, the last frame in ours (the game is the same: ale-py's v5
  skip repeats the action 4 frames as MaxAndSkipEnv does, sticky actions drawn per frame either way);
- the episodes' randomness: the same seed gives both the same emulator start and the same sticky-action stream, but
  after the first different action (or FIRE/RIGHT above) the two games part.
"""

from __future__ import annotations

import argparse
import json
import sys

import ale_py
import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import QRDQN
from stable_baselines3.common.atari_wrappers import AtariWrapper
from train import ENV_ID, ENV_KWARGS, FRAME_STACK


def parse_seeds(text: str) -> list[int]:
    """'A-B' inclusive ranges and comma lists: 600000-600029, 5,7-9."""
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def make_eval_env() -> gym.Env:
    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, **ENV_KWARGS)
    return AtariWrapper(env, noop_max=0, terminal_on_life_loss=False, clip_reward=False)


def play(model, env: gym.Env, seed: int, max_frames: int | None) -> dict:
    frame, _ = env.reset(seed=seed)
    stack = np.zeros((*frame.shape[:2], FRAME_STACK), np.uint8)  # (84, 84, 4), oldest first, as VecFrameStack
    stack[..., -1] = frame[..., 0]
    score, actions, end = 0.0, 0, None
    ale = env.unwrapped.ale
    while end is None:
        action, _ = model.predict(stack, deterministic=True)
        frame, reward, terminated, truncated, _ = env.step(int(action))
        score += float(reward)
        actions += 1
        stack = np.roll(stack, -1, axis=-1)
        stack[..., -1] = frame[..., 0]
        if terminated or truncated:
            end = "terminated" if terminated else "truncated"
        elif max_frames is not None and ale.getEpisodeFrameNumber() >= max_frames:
            end = "max_frames"
    frames = int(ale.getEpisodeFrameNumber())
    return dict(kind="episode", seed=seed, score=score, frames=frames, actions=actions, game_time_s=round(frames / 60, 2), end=end)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a .zip saved by train.py")
    parser.add_argument("--seeds", required=True, type=parse_seeds, help="e.g. 600000-600029 (the test seeds of config_files/enduro.py)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--max-frames", type=int, default=None, help="debug only: end an episode after this many frames")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    # custom_objects: the training's schedules are not needed to act, and the replay is not made at all
    model = QRDQN.load(args.model, device="cpu", custom_objects=dict(buffer_size=1, learning_starts=0))
    env = make_eval_env()
    print(f"evaluating {args.model} on {len(args.seeds)} seed(s), {ENV_ID} {ENV_KWARGS}", file=sys.stderr)
    scores = []
    for seed in args.seeds:
        record = play(model, env, seed, args.max_frames)
        scores.append(record["score"])
        print(json.dumps(record), flush=True)
    env.close()
    summary = dict(
        kind="summary",
        model=args.model,
        episodes=len(scores),
        mean=float(np.mean(scores)),
        std=float(np.std(scores)),
        min=float(np.min(scores)),
        median=float(np.median(scores)),
        max=float(np.max(scores)),
        seeds=[args.seeds[0], args.seeds[-1]],
        max_frames=args.max_frames,
    )
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
