"""The ONNX sidecar of a SuperTuxKart model (trackmania_rl/agents/onnx_export.py policy_sidecar): its frame is described
by the kart's backend, and names no renderer (CarRacing's `frame_renderer`, "fast" or "pygame", is no choice this game
has). Needs the supertuxkart and onnx extras; starts no game."""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from trackmania_rl.agents import onnx_export  # noqa: E402
from trackmania_rl.agents.iqn import make_network  # noqa: E402
from trackmania_rl.games import float_layout_for  # noqa: E402
from trackmania_rl.games.backend import game_backend  # noqa: E402

pytestmark = [pytest.mark.supertuxkart, pytest.mark.onnx]

# the kart config's game, frames, floats and actions with a small network (a quick export)
SMALL_NETWORK = dict(conv_layers=[(8, 4, 2), (8, 4, 2)], dense_hidden_dimension=32, float_hidden_dim=16, iqn_embedding_dimension=16)


@pytest.fixture(scope="module")
def exported(kart_cfg):
    """(cfg, layout, network, its model) for a small network of the SuperTuxKart config."""
    cfg = kart_cfg.replace(**SMALL_NETWORK)
    layout = float_layout_for(cfg)
    torch.manual_seed(0)
    network = make_network(cfg, layout, len(cfg.inputs))
    return cfg, layout, network, onnx_export.export_acting_network(network, cfg.iqn_k)


def test_the_sidecar_of_a_kart_model_describes_its_frame_and_names_no_renderer(exported):
    cfg, layout, network, model = exported
    sidecar = onnx_export.policy_sidecar(cfg, layout, "supertuxkart", model, 3)
    assert sidecar["game"] == "supertuxkart" and sidecar["n_actions"] == len(cfg.inputs) == 14
    frame = sidecar["frame"]
    assert frame["shape"] == [1, cfg.H_downsized, cfg.W_downsized] and frame["stack"] == 1 and frame["channels_per_frame"] == 1
    # how the frame is made is the kart backend's: the road drawn from the driveline, no renderer to choose
    assert frame["preprocessing"] == game_backend("supertuxkart").frame_preprocessing(cfg) and "driveline" in frame["preprocessing"]
    assert "renderer" not in frame, f"a kart model's sidecar names renderer {frame.get('renderer')!r}, CarRacing's setting"
    # whatever CarRacing's setting says in the config, the kart's sidecar is the same
    assert onnx_export.policy_sidecar(cfg.replace(frame_renderer="pygame"), layout, "supertuxkart", model, 3) == sidecar
    # the model it describes decides on frames and floats of the sidecar's shapes
    frames = np.zeros((2, *frame["shape"]), np.uint8)
    floats = np.tile(layout.mean.astype(np.float32), (2, 1))
    q = onnx_export.OnnxPolicy(model)(frames, floats)
    assert q.shape == (2, sidecar["n_actions"]) and np.isfinite(q).all()
    json.dumps(sidecar)  # plain JSON
