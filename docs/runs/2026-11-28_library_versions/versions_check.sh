#!/usr/bin/env bash
# the pixel tests and the shipped model's 100 test races under other library versions
set -u
cd /work/main
source /work/venv_old/bin/activate
out=docs/runs/2026-11-28_library_versions
for combo in "4.10.0.84 2.5.8" "5.0.0.93 2.4.1" "5.0.0.93 2.5.0" "4.10.0.84 2.1.3"; do
  set -- $combo
  pip install -q "opencv-python-headless==$1" "pygame-ce==$2" > /dev/null 2>&1
  tag="opencv-$1_pygame-ce-$2"
  python -c "import cv2, pygame; print('$tag:', cv2.__version__, pygame.version.ver)"
  timeout 600 python -m pytest -q -p no:randomly tests/games/car_racing tests/learner/test_held_out.py 2>&1 | tail -n 2 | sed "s/^/$tag pytest: /"
  python scripts/evaluate.py --weights models/carracing_default/weights.torch --seeds 500000-500099 --rules native --workers 2 > $out/shipped_model_native_$tag.jsonl 2>/dev/null
  python - "$out/shipped_model_native_$tag.jsonl" <<'PY'
import json, sys
def races(p): return {d["seed"]: d for d in map(json.loads, open(p)) if d.get("kind") == "race"}
ref = races("docs/runs/2026-11-28_missed_tiles/default_1h/best_500000-500099_native.jsonl")
new = races(sys.argv[1])
same = sum(abs(new[s]["native_score"] - ref[s]["native_score"]) < 1e-9 and new[s]["n_actions"] == ref[s]["n_actions"] for s in ref)
summary = [d for d in map(json.loads, open(sys.argv[1])) if d.get("kind") == "summary"][0]
print(f"{sys.argv[1]}: {same} of {len(ref)} races identical to the recorded ones (score and actions); mean {summary['mean_native_score']:.2f}")
PY
done
pip install -q "opencv-python-headless==5.0.0.93" "pygame-ce==2.5.8" > /dev/null 2>&1
