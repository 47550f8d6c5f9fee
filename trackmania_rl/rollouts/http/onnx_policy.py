"""GET /v1/policy?format=onnx: the published weights as an ONNX model and its sidecar (agents/onnx_export.py).

An export costs about a second of CPU in Python (holding the GIL), so nothing is exported when the learner
publishes, and never on the learner's training thread nor on the server's event loop: the first request
exports the run's architecture once, from the version it asks for, and keeps that model as the template;
every later version asked for is the template refilled with that version's weights (milliseconds). The
newest answer is kept, so clients asking for the same version share one body. One export at a time, in
the server's worker threads.

The ONNX tooling is the optional `onnx` extra, imported at the first request: without it the answer is 501.
"""

from __future__ import annotations

import threading

import torch

from trackmania_rl.agents.iqn import load_state_dict_into, make_network
from trackmania_rl.rollouts.http import wire

FORMAT = "onnx"


class OnnxUnavailable(RuntimeError):
    """The learner has no onnx extra; the message says what to install."""


def available() -> bool:
    """Whether this process can export (the extra's exporter packages are installed; nothing imported)."""
    from trackmania_rl.agents import onnx_export

    return not onnx_export.missing_packages(onnx_export.EXPORT_PACKAGES)


class OnnxPolicyCache:
    """`body(version, weights_body)`: the msgpack answer {version, onnx: bin, sidecar: map} for a version whose
    typed-array body (wire.encode_weights) is `weights_body`. `live` gives the run's config, `layout` its
    float layout (the architecture is restart-only: one template serves the whole process)."""

    def __init__(self, live, layout, game_backend: str):
        self.live, self.layout, self.game_backend = live, layout, game_backend
        self._lock = threading.Lock()
        self._template: bytes | None = None
        self._newest: tuple[int, bytes] | None = None
        self.exports = 0  # full exports (1 per process, unless one failed)
        self.refills = 0

    def body(self, version: int, weights_body: bytes) -> bytes:
        with self._lock:
            if self._newest is not None and self._newest[0] == version:
                return self._newest[1]
            model = self._model(weights_body)
            from trackmania_rl.agents.onnx_export import policy_sidecar

            sidecar = policy_sidecar(self.live.current, self.layout, self.game_backend, model, version)
            body = wire.pack({"version": int(version), FORMAT: model, "sidecar": sidecar})
            self._newest = (int(version), body)
            return body

    def _model(self, weights_body: bytes) -> bytes:
        from trackmania_rl.agents import onnx_export

        missing = onnx_export.missing_packages(onnx_export.EXPORT_PACKAGES)
        if missing:
            raise OnnxUnavailable(
                f"format=onnx is not served: the learner lacks the onnx extra ({onnx_export.EXTRA_HINT} where it runs; "
                f"missing: {', '.join(missing)})"
            )
        _, arrays = wire.decode_weights(weights_body, max_bin_len=len(weights_body))
        if self._template is not None:
            self.refills += 1
            return onnx_export.with_weights(self._template, arrays)
        cfg = self.live.current
        network = make_network(cfg, self.layout, len(cfg.inputs), "cpu")
        load_state_dict_into(network, {name: torch.from_numpy(array) for name, array in arrays.items()}, "the published weights")
        model = onnx_export.export_acting_network(network, cfg.iqn_k)
        self._template = model
        self.exports += 1
        return model
