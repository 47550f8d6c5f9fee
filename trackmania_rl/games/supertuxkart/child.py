"""The game's own process: `python -m trackmania_rl.games.supertuxkart.child FD`, started by process.py.

pystk2 may be initialised once per process, and the game ends its process on a fatal error (an arena's missing lap line
calls exit; a crash aborts): so the game lives here, alone, and the trainer's processes never import pystk2. The
process answers requests on the connection whose file descriptor it is given, one at a time, until "close" or the
connection ends (its parent is gone). A request is (kind, arguments); the answer ("ok", value) or ("error", text)
when the request raised (the process goes on). Values are plain Python and numpy:

- ("start", {track, reverse, laps, difficulty, kart, seed, ai}): a new race (the last one is stopped; Race.restart
  crashes the game), waited through its countdown to the start signal -> {"driveline", "state", "intro_steps"}.
  A start asking for the race just started and not yet stepped keeps it (zones asked before a race cost one load).
- ("step", {controls, steps}): `controls` (acceleration, brake, steer, drift, nitro, rescue) held for up to `steps`
  race steps, fewer if the race finishes -> a list of states, one per step played.
- ("ai_race", {..start's arguments.., max_steps}): a whole race with the game's AI driving our kart -> {"finished",
  "finish_time", "steps"}.
A state is a tuple of floats in the order STATE_FIELDS; a driveline the track's nodes (see driveline.py).
"""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection

# A kart's state after a step. Positions and vectors are world coordinates (x, y up, z): SuperTuxKart's, where seen
# from above with z ahead, x is on the right. `front` is a point half a kart ahead of `location`.
STATE_FIELDS = (
    "time",  # s of race time (0 at the start signal)
    "x",
    "y",
    "z",
    "front_x",
    "front_y",
    "front_z",
    "velocity_x",
    "velocity_y",
    "velocity_z",
    "yaw_rate",  # rad/s about the up axis, positive turning right
    "on_road",  # 1.0 on the driveline's road
    "jumping",  # 1.0 in the air
    "energy",  # nitro collected
    "skid",  # the skid factor (1.0 when not drifting)
    "finished",  # 1.0 once the race is finished
    "finish_time",  # s, the game's time of the finish (valid once finished)
)
STATE_INDEX = {name: i for i, name in enumerate(STATE_FIELDS)}


def _state(world) -> tuple:
    kart = world.karts[0]
    location, front, velocity = kart.location, kart.front, kart.velocity
    return (
        float(world.time),
        *map(float, location),
        *map(float, front),
        *map(float, velocity),
        float(kart.angular_velocity[1]),
        float(kart.is_on_road),
        float(kart.jumping),
        float(kart.energy),
        float(kart.skeed_factor),
        float(kart.has_finished_race),
        float(kart.finish_time),
    )


class _Game:
    """pystk2, initialised, and the race in play."""

    def __init__(self):
        import pystk2

        self.pystk2 = pystk2
        pystk2.init(pystk2.GraphicsConfig.none())
        pystk2.set_log_level(pystk2.LogLevel.error)
        self.race = None
        self.world = None
        self.key = None  # the arguments of the race in play, while it is fresh (started, not stepped)
        self.fresh = None  # its answer
        self.action = pystk2.Action()
        self.go = int(pystk2.WorldState.Phase.GO_PHASE)

    def info(self) -> dict:
        return {"karts": list(self.pystk2.list_karts()), "tracks": list(self.pystk2.list_tracks())}

    def start(self, track, reverse, laps, difficulty, kart, seed, ai=False) -> dict:
        key = (track, reverse, laps, difficulty, kart, seed, ai)
        if key == self.key:
            return self.fresh
        self._stop()
        pystk2 = self.pystk2
        config = pystk2.RaceConfig()
        config.track, config.reverse, config.laps, config.seed = track, bool(reverse), int(laps), int(seed)
        config.mode = pystk2.RaceConfig.RaceMode.TIME_TRIAL
        config.num_kart, config.difficulty = 1, int(difficulty)
        player = config.players[0]
        player.kart = kart
        if ai:
            player.controller = pystk2.PlayerConfig.Controller.AI_CONTROL
        self.race = pystk2.Race(config)
        self.race.start()
        self.world = pystk2.WorldState()
        self.world.update()
        intro_steps = 0
        idle = () if ai else (pystk2.Action(),)  # the AI's kart takes no action from us
        while int(self.world.phase) < self.go:  # the countdown: nothing to decide before the start signal
            self.race.step(*idle)
            self.world.update()
            intro_steps += 1
        track_state = pystk2.Track()  # a new one each race: an old one keeps the previous track's successors
        track_state.update()
        driveline = {
            "nodes": [[list(map(float, point)) for point in node] for node in track_state.path_nodes],
            "widths": [float(width[0]) for width in track_state.path_width],
            "distances": [list(map(float, d)) for d in track_state.path_distance],
            "successors": [list(map(int, s)) for s in track_state.successors],
            "length": float(track_state.length),
        }
        self.key = key
        self.fresh = {"driveline": driveline, "state": _state(self.world), "intro_steps": intro_steps}
        return self.fresh

    def step(self, controls, steps) -> list:
        if self.race is None:
            raise RuntimeError("no race started")
        self.key = None
        action = self.action
        action.acceleration, action.brake, action.steer, action.drift, action.nitro, action.rescue = controls
        states = []
        for _ in range(int(steps)):
            self.race.step(action)
            self.world.update()
            state = _state(self.world)
            states.append(state)
            if state[STATE_INDEX["finished"]]:
                break
        return states

    def ai_race(self, max_steps, **race) -> dict:
        self.start(**race, ai=True)
        self.key = None
        finished, steps = False, 0
        while steps < max_steps and not finished:
            self.race.step()
            self.world.update()
            steps += 1
            finished = bool(self.world.karts[0].has_finished_race)
        finish_time = float(self.world.karts[0].finish_time) if finished else None
        return {"finished": finished, "finish_time": finish_time, "steps": steps}

    def _stop(self) -> None:
        self.key = self.fresh = None
        if self.race is not None:
            self.race.stop()
            self.race = self.world = None


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it closes this process
    connection = Connection(int(argv[1]))
    game = _Game()
    connection.send(("ok", game.info()))
    handlers = {"start": game.start, "step": game.step, "ai_race": game.ai_race}
    while True:
        try:
            kind, arguments = connection.recv()
        except EOFError:  # the parent is gone
            return 0
        if kind == "close":
            return 0
        try:
            answer = ("ok", handlers[kind](**arguments))
        except Exception as e:  # the request failed, the game lives on: the parent decides
            answer = ("error", f"{type(e).__name__}: {e}")
        connection.send(answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
