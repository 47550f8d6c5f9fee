"""Measure the figures of DESIGN §5. Prints one JSON object per line: {"figure", "value", "unit", ...}.

    python scripts/benchmark.py game|learner|pipeline|absorb|learners|all
    python scripts/benchmark.py ray|http     # the optional sources (pip install -e ".[ray]" / ".[http]"); not in `all`
    python scripts/benchmark.py export       # the policy as ONNX against the acting program (pip install -e ".[onnx]"); not in `all`
    python scripts/benchmark.py enduro       # Enduro's collector stages and learner step (pip install -e ".[atari]"); not in `all`
    python scripts/benchmark.py learner --device cuda   # the train-step figures on a GPU
    python scripts/benchmark.py absorb --device cuda    # the learner's capacity (races taken, stored, learned) on a GPU
    python scripts/benchmark.py learners                # 2 data-parallel CPU ranks vs 1 (scaling_2, step_ms), both precisions
    python scripts/benchmark.py learners --precision bfloat16   # one precision only
    python scripts/benchmark.py learners_lr             # the lr rule of 2 ranks on a TD-loss proxy; not in `all`
Each suite lives in trackmania_rl/benchmarks/<suite>.py as `run(args) -> iterator of figure dicts`.
"""

import argparse
import importlib
import json

from trackmania_rl.device import choose_device

SUITES = ("game", "learner", "pipeline", "absorb", "learners")
OPTIONAL_SUITES = ("ray", "http", "export", "enduro")  # each needs its extra installed (export: onnx; enduro: atari)
SEPARATE_SUITES = ("learners_lr",)  # long (minutes of training): not part of `all`


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=SUITES + OPTIONAL_SUITES + SEPARATE_SUITES + ("all",))
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, figures are noisier)")
    device_help = "torch device of the learner's train step (learner and absorb suites): cpu (default), cuda[:i] or auto (cuda if present)"
    parser.add_argument("--device", default="cpu", help=device_help)
    precision_help = "the learners suite's train-step precision: float32, bfloat16 or both (default)"
    parser.add_argument("--precision", choices=("float32", "bfloat16", "both"), default="both", help=precision_help)
    args = parser.parse_args(argv)
    try:
        choose_device(args.device)
    except ValueError as e:
        parser.error(f"--device: {e}")
    suites = SUITES if args.suite == "all" else (args.suite,)
    for suite in suites:
        module = importlib.import_module(f"trackmania_rl.benchmarks.{suite}")
        for figure in module.run(args):
            print(json.dumps(figure), flush=True)


if __name__ == "__main__":
    main()
