"""GET /v1/policy?format=onnx (rollouts/http/onnx_policy.py) on a real server on 127.0.0.1: the model of the version
published, 304 when current, made once per architecture and refilled per version, the same token and answers as the
typed-array form. Needs the http and onnx extras."""

import numpy as np
import pytest
import torch

msgpack = pytest.importorskip("msgpack")
pytest.importorskip("fastapi")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from trackmania_rl.agents.acting import make_inference_network  # noqa: E402
from trackmania_rl.agents.exploration import midpoint_taus  # noqa: E402
from trackmania_rl.agents.iqn import make_network  # noqa: E402
from trackmania_rl.agents.onnx_export import OnnxPolicy  # noqa: E402

pytestmark = [pytest.mark.http, pytest.mark.onnx]


def acting_q(network, cfg, layout, frames, floats) -> np.ndarray:
    acting = make_inference_network(cfg, layout, len(cfg.inputs), jit=False)
    acting.load_state_dict_from(network)
    q = acting.mean_q_at(midpoint_taus(cfg.iqn_k))
    return np.stack([q(frames[i], floats[i]) for i in range(len(frames))])


def pull(http, have: int):
    status, data = http.request("GET", f"/v1/policy?have={have}&format=onnx")
    return status, (msgpack.unpackb(data, raw=False) if status == 200 else data)


def test_the_onnx_policy_follows_the_published_versions(served):
    cfg, layout = served.cfg, served.layout
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (6, 1, cfg.H_downsized, cfg.W_downsized), dtype=np.uint8)
    floats = (layout.mean + layout.std * rng.standard_normal((6, layout.dim))).astype(np.float32)
    http = served.client()
    for version in (2, 3):  # the first is exported, the second refilled from it
        torch.manual_seed(version)
        network = make_network(cfg, layout, len(cfg.inputs))
        served.source.publish(version, network.state_dict())
        status, answer = pull(http, have=version - 1)
        assert status == 200 and set(answer) == {"version", "onnx", "sidecar"} and answer["version"] == version
        assert answer["sidecar"]["policy_version"] == version and answer["sidecar"]["model_bytes"] == len(answer["onnx"])
        q = OnnxPolicy(answer["onnx"])(frames, floats)
        np.testing.assert_allclose(q, acting_q(network, cfg, layout, frames, floats), rtol=1e-5, atol=1e-5)
        assert http.request("GET", f"/v1/policy?have={version}&format=onnx")[0] == 304
    assert (served.source.onnx.exports, served.source.onnx.refills) == (1, 1)
    # a second client asking for the current version gets the same body, made once
    first, second = (served.client().request("GET", f"/v1/policy?have={have}&format=onnx")[1] for have in (-1, 2))
    assert first == second
    assert served.source.onnx.refills == 1


def test_the_onnx_form_keeps_the_token_and_names_a_bad_format(served):
    assert served.client(token=None).request("GET", "/v1/policy?format=onnx")[0] == 401
    assert served.client(token="0" * 64).request("GET", "/v1/policy?format=onnx")[0] == 401
    status, answer = served.client().json("GET", "/v1/policy?format=pickle")
    assert status == 422 and "`format` 'pickle'" in answer["detail"]
    status, data = served.client().request("GET", "/v1/policy?format=arrays")  # the typed-array form stays
    assert status == 200 and set(msgpack.unpackb(data, raw=False)) == {"version", "arrays"}
    assert served.source.onnx.exports == 0  # nothing exported unless asked for


def test_the_contract_lists_the_policy_formats(served):
    http = served.client()
    status, answer = http.json("POST", "/v1/register", {"name": "t", "game": "carracing", "protocol_version": 1})
    assert status == 200 and answer["contract"]["policy_formats"] == ["arrays", "onnx"]
