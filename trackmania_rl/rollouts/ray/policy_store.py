"""The policy store: a small actor holding what every collector actor must follow (DESIGN §2, §7).

- the latest published weights: ONE object-store object (name -> numpy array) put by the learner, held here
  by reference with its policy version. An actor asks for `(version, ref)` and `ray.get`s the ref only when
  the version is newer than its own; all actors of a node then read that node's one copy (Ray keeps one
  per node in its shared-memory object store; the numpy arrays an actor gets are read-only views of it);
- the pause flag (pacing), the learner's frame count (exploration schedules) and the run's config values
  with their own version (a live config edit reaches actors on nodes without the run folder).

The learner's status (`status()`: version, pause flag, frame count, config version) reaches a playing actor with
each handoff (rollouts/ray/source.py); an actor asks the store for it only at its start and while its game is
parked by a pause: one tiny call, no weights moved.

The store is a named actor and collector actors are given its name, not its handle: a handle among an actor's
constructor arguments is kept in the object store, and Ray then warns at every start that a restart could fail if
that object were lost (ray-project/ray#53727); a name is a plain string, and `ray.get_actor` finds the store
again after any restart of either side.
"""

from __future__ import annotations

import uuid

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


class PolicyStore:
    """Its methods are called by the learner (publish, set_*) and by the collector actors (status, weights, config)."""

    def __init__(self, config_values: dict):
        self.version = 0  # 0: nothing published yet (actors keep their initial weights)
        self.weights_ref = None
        self.paused = False
        self.frames_played = 0
        self.config_values = config_values
        self.config_version = 1

    def publish(self, version: int, wrapped_ref: list) -> None:
        """`wrapped_ref`: [ObjectRef] (in a list, so that Ray hands us the reference, not the arrays)."""
        self.version = int(version)
        self.weights_ref = wrapped_ref[0]  # the previous object is freed once no actor reads it any more

    def set_paused(self, paused: bool) -> None:
        self.paused = bool(paused)

    def set_frames_played(self, frames_played: int) -> None:
        self.frames_played = int(frames_played)

    def set_config(self, config_values: dict, config_version: int) -> None:
        """The learner's count, not the store's own: a store restarted from its constructor's values (version 1)
        takes the learner's version back with the values (RaySource resends them)."""
        self.config_values = config_values
        self.config_version = int(config_version)

    def status(self) -> tuple[int, bool, int, int]:
        """(weights version, paused, frames played, config version): what an actor polls."""
        return self.version, self.paused, self.frames_played, self.config_version

    def weights(self) -> tuple[int, list]:
        """(version, [ref]); [None] before the first publish."""
        return self.version, [self.weights_ref]

    def config(self) -> tuple[int, dict]:
        return self.config_version, self.config_values


def start_policy_store(config_values: dict) -> tuple[object, str]:
    """(the store's actor handle, its name), on the learner's node. No CPU reserved (it only answers small calls);
    restarted if its process dies (its state is then the constructor's until RaySource's next health check sends
    the learner's again: the weights, the pause flag, the frame count, the config values and their version).
    The name is unique per call and lives in the driver's namespace: the actors of this run find it by name."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    name = f"tmrl-policy-store-{uuid.uuid4().hex[:12]}"
    remote = ray.remote(num_cpus=0, max_restarts=-1, scheduling_strategy=here, name=name)(PolicyStore)
    return remote.remote(config_values), name
