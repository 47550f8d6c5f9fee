"""The game process of a Ray collector actor (seed 000's EnvWorker), and the actor's handle on it (`EnvWorker`).

A collector actor runs its game in its own process, started and watched by the actor: the game, its map cycle and
the race loop's game side (`RacePlayer`, rollouts/race.py) play here, and the actor decides the actions with its
network (rollouts/ray/actor.py). The game's `exploration_policy` callback is an `ActorPolicy`: it sends the
observation to the actor and waits for the Q values (A,) and the policy version they were computed with, then
explores over them as a collector does (`Explorer.choose`: epsilon, epsilon-Boltzmann, from the schedules at the
learner's frame count, per race). `update_network()` (every `update_inference_network_every_n_actions` decisions,
and at each race's start) asks the actor, with the next observation, to bring its network up to date first.

The two processes talk over a socket pair; each message is one `send_bytes`, its first byte says what it is:
- actor -> game: SETUP (once, JSON: actor index, producers, seed, game backend, config values), GO (start a race: the
  learner's frame count, the config values when they changed; JSON), Q (the answer to an observation: version
  int64 and Q values float32 at fixed offsets);
- game -> actor: WANT_RACE, OBSERVATION (refresh flag, floats float32, frame uint8 at fixed offsets), RACE (the
  finished race in its object-store form, race_arrays.py, pickled: the actor's own child, the same trust as a
  local collector's queue).
The game asks for each race and starts it only on GO: pausing and backpressure stay the actor's. When the actor
dies, its end of the socket closes (and Linux's parent-death signal fires): the game process ends with it.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

import numpy as np
import torch

from trackmania_rl.agents.acting import use_acting_torch_settings
from trackmania_rl.agents.exploration import Explorer
from trackmania_rl.agents.policy import RacePolicy
from trackmania_rl.config.values import config_from_values
from trackmania_rl.rollouts.local.collector import die_with_parent
from trackmania_rl.rollouts.race import RacePlayer
from trackmania_rl.rollouts.ray import race_arrays

ENV_WORKER_MODULE = __name__  # run as `python -m trackmania_rl.rollouts.ray.env_worker FD PARENT_PID`
SOURCE_NAME = "ray"  # meta["source"] of every race an actor plays

SETUP, GO, Q = b"S", b"G", b"Q"  # actor -> game
WANT_RACE, OBSERVATION, RACE = b"N", b"O", b"R"  # game -> actor
HEADER_BYTES = 8  # kind, refresh flag, padding: the arrays after it start 8-byte aligned


class ObservationLayout:
    """Where an observation's parts lie in its message, and the Q answer's in its: fixed offsets, no framing."""

    def __init__(self, frame_shape: tuple, float_dim: int, n_actions: int):
        self.frame_shape = tuple(frame_shape)
        self.frame_size = int(np.prod(frame_shape))
        self.float_dim = int(float_dim)
        self.n_actions = int(n_actions)
        self.message_bytes = HEADER_BYTES + 4 * self.float_dim + self.frame_size
        self.answer_bytes = HEADER_BYTES + 8 + 4 * self.n_actions

    def floats(self, message) -> np.ndarray:
        return np.frombuffer(message, np.float32, self.float_dim, HEADER_BYTES)

    def frame(self, message) -> np.ndarray:
        return np.frombuffer(message, np.uint8, self.frame_size, HEADER_BYTES + 4 * self.float_dim).reshape(self.frame_shape)

    def version(self, answer) -> np.ndarray:
        return np.frombuffer(answer, np.int64, 1, HEADER_BYTES)

    def q_values(self, answer) -> np.ndarray:
        return np.frombuffer(answer, np.float32, self.n_actions, HEADER_BYTES + 8)


class ActorPolicy(RacePolicy):
    """A game process's policy: the Q values from its actor, the exploration here, as a collector's."""

    def __init__(self, connection: Connection, cfg, layout: ObservationLayout):
        super().__init__()
        self.explorer = Explorer(cfg, layout.n_actions)
        self.connection = connection
        self.layout = layout
        self._message = bytearray(layout.message_bytes)
        self._message[0] = OBSERVATION[0]
        self._floats, self._frame = layout.floats(self._message), layout.frame(self._message)
        self._answer = bytearray(layout.answer_bytes)
        self._version, self._q = layout.version(self._answer), layout.q_values(self._answer)
        self.refresh = False
        self.wait_s = 0.0  # this race's time waiting for the actor's answers

    def update_network(self) -> None:
        self.refresh = True  # sent with the next observation

    def __call__(self, frame: np.ndarray, state_float: np.ndarray):
        self._message[1] = self.refresh
        self.refresh = False
        self._floats[:] = state_float
        self._frame[:] = frame.reshape(self.layout.frame_shape)
        start = time.perf_counter()
        self.connection.send_bytes(self._message)
        size = self.connection.recv_bytes_into(self._answer)
        self.wait_s += time.perf_counter() - start
        if size != len(self._answer) or self._answer[0] != Q[0]:
            raise RuntimeError(f"expected the actor's Q values ({len(self._answer)} bytes), got {bytes(self._answer[:1])!r} ({size} bytes)")
        self.versions_used.append(int(self._version[0]))
        return self.explorer.choose(self._q.copy())


def _play(connection: Connection) -> None:
    """The game process's life: set up, then one race per GO, each sent back whole, until the actor is gone."""
    setup = json.loads(connection.recv_bytes()[1:])
    index = setup["actor"]

    def log(message: str) -> None:
        print(f"[ray actor {index} game] {message}", flush=True)

    cfg = config_from_values(setup["config_values"], setup["game_backend"])
    seed = setup["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

    def make_policy(cfg, float_layout, n_actions):
        return ActorPolicy(connection, cfg, ObservationLayout((1, cfg.H_downsized, cfg.W_downsized), float_layout.dim, n_actions))

    player = RacePlayer(cfg, setup["game_backend"], None, index, setup["producers"], SOURCE_NAME, log, make_policy=make_policy)
    try:
        while True:
            connection.send_bytes(WANT_RACE)
            go = connection.recv_bytes()
            if go[:1] != GO:
                raise RuntimeError(f"expected GO from the actor, got {go[:1]!r}")
            order = json.loads(go[1:])
            if order.get("config_values") is not None:
                player.update_config(config_from_values(order["config_values"], setup["game_backend"]))
            player.policy.wait_s = 0.0
            envelope = player.play(order["frames_played"])
            if envelope is None:  # the game crashed: logged by the player, the race dropped
                continue
            envelope.meta["decision_wait_s"] = player.policy.wait_s
            connection.send_bytes(RACE + pickle.dumps(race_arrays.to_arrays(envelope), protocol=pickle.HIGHEST_PROTOCOL))
            player.handed_off()
    finally:
        player.close()


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's; the actor ends us
    die_with_parent()
    if os.getppid() != parent:  # the actor died before the death signal was armed
        return 0
    use_acting_torch_settings()  # one torch thread per process
    connection = Connection(fd)
    try:
        _play(connection)
    except (EOFError, BrokenPipeError, ConnectionResetError):  # the actor is gone, or ended us: nothing to report
        return 0
    return 0


class EnvWorker:
    """The actor's handle on its game process: `start()` (again after a death), `send`, `receive`, `stop()`.
    `state` is "stopped", "starting" (building the game), "idle" (waiting for GO) or "racing"."""

    def __init__(self, setup: dict):
        self.setup = setup
        self.process: subprocess.Popen | None = None
        self.connection: Connection | None = None
        self.state = "stopped"
        self.config_version = 0  # of the config values the game plays with
        self.starts = 0
        self.races = 0  # races delivered by the current process
        self.last_heard = 0.0  # time.monotonic() of its last message (or start)
        self.wait_started = 0.0  # when it asked for its race (backpressure figure)
        self.restart_at = 0.0  # time.monotonic() after which an ended process is replaced

    @property
    def restarts(self) -> int:
        """Processes started after the first."""
        return max(0, self.starts - 1)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self, config_version: int, config_values: dict) -> None:
        ours, theirs = socket.socketpair()
        try:
            command = [sys.executable, "-m", ENV_WORKER_MODULE, str(theirs.fileno()), str(os.getpid())]
            self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.starts += 1
        self.connection = Connection(ours.detach())
        self.config_version = config_version
        self.races = 0
        self.state = "starting"
        self.last_heard = time.monotonic()
        self.send(SETUP + json.dumps({**self.setup, "config_values": config_values}).encode())

    def send(self, message) -> None:
        self.connection.send_bytes(message)

    def receive(self) -> bytes:
        message = self.connection.recv_bytes()
        self.last_heard = time.monotonic()
        return message

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def stop(self) -> None:
        """End the process (SIGKILL: a game holds nothing worth a clean exit) and close our end."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.connection is not None:
            self.connection.close()
        self.state = "stopped"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
