"""The acting network as ONNX (trackmania_rl/agents/onnx_export.py, scripts/export.py): ONNX Runtime decides as
a collector's acting program does, the graph takes other weights of its architecture and refuses others, the
sidecar describes the model, and the script writes both or exits 2 naming the problem. Needs the onnx extra."""

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from tests.helpers import layout_for, tiny_config  # noqa: E402
from trackmania_rl.agents import onnx_export  # noqa: E402
from trackmania_rl.agents.acting import make_inference_network  # noqa: E402
from trackmania_rl.agents.exploration import midpoint_taus  # noqa: E402
from trackmania_rl.agents.iqn import make_network, save_network  # noqa: E402
from trackmania_rl.config.values import settings_json  # noqa: E402

pytestmark = pytest.mark.onnx

REPO_ROOT = Path(__file__).resolve().parents[2]


def acting_q(network, cfg, layout, frames, floats) -> np.ndarray:
    """The collectors' decision: their acting program (MeanQAtFixedTaus) at the iqn_k midpoint fractions."""
    acting = make_inference_network(cfg, layout, len(cfg.inputs), jit=False)
    acting.load_state_dict_from(network)
    q = acting.mean_q_at(midpoint_taus(cfg.iqn_k))
    return np.stack([q(frames[i], floats[i]) for i in range(len(frames))])


def states(cfg, layout, batch, seed):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (batch, 1, cfg.H_downsized, cfg.W_downsized), dtype=np.uint8)
    floats = (layout.mean + layout.std * rng.standard_normal((batch, layout.dim))).astype(np.float32)
    return frames, floats


@pytest.fixture(scope="module")
def exported():
    """(cfg, layout, network, its model) for the tiny test network."""
    cfg = tiny_config()
    layout = layout_for(cfg)
    torch.manual_seed(0)
    network = make_network(cfg, layout, len(cfg.inputs))
    return cfg, layout, network, onnx_export.export_acting_network(network, cfg.iqn_k)


def test_onnx_runtime_decides_as_the_acting_program_at_any_batch_size(exported):
    cfg, layout, network, model = exported
    frames, floats = states(cfg, layout, 7, seed=1)
    expected = acting_q(network, cfg, layout, frames, floats)
    policy = onnx_export.OnnxPolicy(model)
    for batch in (1, 7):  # the batch axis is dynamic
        q = policy(frames[:batch], floats[:batch])
        assert q.shape == (batch, len(cfg.inputs)) and q.dtype == np.float32
        np.testing.assert_allclose(q, expected[:batch], rtol=1e-5, atol=1e-5)
        assert (q.argmax(axis=1) == expected[:batch].argmax(axis=1)).all()


def test_the_sidecar_describes_the_model(exported):
    cfg, layout, _, model = exported
    sidecar = onnx_export.policy_sidecar(cfg, layout, "carracing", model, 17)
    session = onnx_export.OnnxPolicy(model).session
    dtypes = {"tensor(uint8)": "uint8", "tensor(float)": "float32"}
    described = [(i.name, dtypes[i.type], i.shape) for i in session.get_inputs()]
    assert described == [(i["name"], i["dtype"], i["shape"]) for i in sidecar["inputs"]]
    (output,) = session.get_outputs()
    assert [output.name, output.shape] == [sidecar["outputs"][0]["name"], sidecar["outputs"][0]["shape"]]
    assert sidecar["policy_version"] == 17 and sidecar["model_sha256"] == hashlib.sha256(model).hexdigest()
    assert sidecar["actions"] == [dict(a) for a in cfg.inputs] and sidecar["n_actions"] == len(cfg.inputs)
    assert sidecar["frame"]["shape"] == [1, cfg.H_downsized, cfg.W_downsized]
    # the renderer its frames come from, and how it draws them
    assert sidecar["frame"]["renderer"] == cfg.frame_renderer == "fast" and "fast_view.py" in sidecar["frame"]["preprocessing"]
    pygame = onnx_export.policy_sidecar(cfg.replace(frame_renderer="pygame"), layout, "carracing", model, 17)["frame"]
    assert pygame["renderer"] == "pygame" and "RGB2GRAY" in pygame["preprocessing"]
    assert [s["name"] for s in sidecar["state_float"]["layout"]] == layout.names()
    assert sum(s["size"] for s in sidecar["state_float"]["layout"]) == sidecar["state_float"]["dim"] == layout.dim
    assert sidecar["quantile_fractions"] == pytest.approx(midpoint_taus(cfg.iqn_k)[0].tolist())
    json.dumps(sidecar)  # plain JSON


def test_the_graph_takes_other_weights_of_its_architecture(exported):
    cfg, layout, network, model = exported
    torch.manual_seed(1)
    other = make_network(cfg, layout, len(cfg.inputs))
    with torch.no_grad():
        other.float_mean.add_(0.5)  # the normalisation travels with the weights too
    refilled = onnx_export.with_weights(model, other.state_dict())
    frames, floats = states(cfg, layout, 5, seed=2)
    q = onnx_export.OnnxPolicy(refilled)(frames, floats)
    np.testing.assert_allclose(q, acting_q(other, cfg, layout, frames, floats), rtol=1e-5, atol=1e-5)
    assert not np.allclose(q, acting_q(network, cfg, layout, frames, floats), atol=1e-3)


def test_weights_of_another_architecture_are_refused(exported):
    cfg, layout, _, model = exported
    wider = make_network(cfg.replace(float_hidden_dim=cfg.float_hidden_dim * 2), layout, len(cfg.inputs))
    with pytest.raises(onnx_export.WeightsDoNotFit, match=r"other shapes: .*float_feature_extractor\.0\.weight \(32, 66\) vs \(16, 66\)"):
        onnx_export.with_weights(model, wider.state_dict())
    partial = {k: v for k, v in wider.state_dict().items() if not k.startswith("V_head")}
    with pytest.raises(onnx_export.WeightsDoNotFit, match=r"missing entries: V_head"):
        onnx_export.with_weights(model, partial)


# ------------------------------------------------------------------------------------ scripts/export.py
def load_script():
    spec = importlib.util.spec_from_file_location("export_script", REPO_ROOT / "scripts" / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, exported):
    """A model folder as the learner keeps one: weights.torch and settings.json."""
    cfg, _, network, _ = exported
    folder = tmp_path_factory.mktemp("model")
    save_network(network, folder / "weights.torch")
    (folder / "settings.json").write_text(settings_json(cfg))
    return folder


def test_export_script_writes_the_model_and_its_sidecar(model_folder, exported, tmp_path, capsys):
    cfg, layout, network, _ = exported
    out = tmp_path / "deeper" / "policy.onnx"
    code = load_script().main(["--weights", str(model_folder / "weights.torch"), "--onnx", str(out), "--policy-version", "42"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["check_same_action_fraction"] == 1.0 and printed["check_max_abs_q_diff"] < 1e-4
    model = out.read_bytes()
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["policy_version"] == 42 and sidecar["model_sha256"] == hashlib.sha256(model).hexdigest()
    frames, floats = states(cfg, layout, 4, seed=3)
    np.testing.assert_allclose(onnx_export.OnnxPolicy(model)(frames, floats), acting_q(network, cfg, layout, frames, floats), atol=1e-5)


@pytest.mark.parametrize(
    "case, args, named",
    [
        ("missing weights", ["--weights", "{tmp}/missing.torch"], "missing.torch: no such file"),
        ("weights of another config", ["--weights", "{weights}", "--config", "{repo}/config_files/config.py"], "does not match"),
        ("missing config", ["--weights", "{weights}", "--config", "{tmp}/nope.py"], "nope.py: no such file"),
    ],
)
def test_export_script_names_bad_input_and_exits_2(case, args, named, model_folder, tmp_path, capsys):
    values = {"tmp": tmp_path, "weights": model_folder / "weights.torch", "repo": REPO_ROOT}
    out = tmp_path / "policy.onnx"
    code = load_script().main([a.format(**values) for a in args] + ["--onnx", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and named in captured.err, (case, captured.err)
    assert captured.out == "" and not out.exists() and not out.with_suffix(".json").exists()


def test_export_script_wants_an_onnx_file_name(model_folder, tmp_path, capsys):
    code = load_script().main(["--weights", str(model_folder / "weights.torch"), "--onnx", str(tmp_path / "policy.json")])
    assert code == 2 and "must end in .onnx" in capsys.readouterr().err
    assert not (tmp_path / "policy.json").exists()


def test_nothing_else_imports_the_onnx_tooling():
    """The default install has no ONNX packages: training, evaluation, the HTTP source and the benchmarks load
    without them (the extra is imported only by the code that exports or runs a model). The HTTP modules need their
    own extra: they are checked where it is installed too (the onnx extra may be installed alone)."""
    modules = ["trackmania_rl.learner.train_loop", "trackmania_rl.evaluation.evaluate", "trackmania_rl.benchmarks.game"]
    if all(importlib.util.find_spec(package) for package in ("fastapi", "uvicorn", "msgpack")):
        modules += ["trackmania_rl.rollouts.http.source", "trackmania_rl.rollouts.http.client"]
    extra = ("onnx", "onnxscript", "onnxruntime")
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted(m for m in {extra!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_an_impala_encoder_exports_and_decides_as_its_acting_program():
    cfg = tiny_config(network_encoder="impala", conv_layers=[(4, 1, 1), (6, 1, 1)])
    layout = layout_for(cfg)
    torch.manual_seed(1)
    network = make_network(cfg, layout, len(cfg.inputs))
    with torch.no_grad():  # residual branches off their identity start, so that they count
        for name, p in network.named_parameters():
            if "conv1" in name:
                p.normal_(0.0, 0.1)
    model = onnx_export.export_acting_network(network, cfg.iqn_k)
    frames, floats = states(cfg, layout, 5, seed=3)
    expected = acting_q(network, cfg, layout, frames, floats)
    np.testing.assert_allclose(onnx_export.OnnxPolicy(model)(frames, floats), expected, rtol=1e-4, atol=1e-4)
