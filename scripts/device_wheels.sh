#!/usr/bin/env bash
# The wheels a GPU box without package registries lacks, fetched here into ./.whl for scripts/gpu_box.sh to install
# there (into /tmp/site, beside the box's own torch):
#
#     bash scripts/device_wheels.sh [PYTHON_VERSION]      # the box's Python, 3.12 by default
#
# The project's pinned versions (pyproject.toml: torchrl, tensordict, gymnasium with Box2D, pygame-ce, ale-py for the
# atari extra) and those of their dependencies that the device image lacks (its package list in the device tool's
# KINDS.md, read 2026-11-17: it has torch, numpy, opencv, tensorboard, joblib, cloudpickle, packaging, zipp); ~23 MB,
# which travels with the working tree (name .whl in the device call's carry: it is git-ignored). One version of each,
# binary wheels only, for x86-64 Linux. Needs pip and a package registry here, nothing else.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then  # the comment block above is the help
    sed -n '2,/^[^#]/p' "$0" | sed -e '/^[^#]/d' -e 's/^# \{0,1\}//'
    exit 0
fi
python_version=${1:-3.12}
cd "$(dirname "$0")/.."
wheels=(
    torchrl==0.14.1 tensordict==0.14.3 gymnasium==1.4.0 box2d==2.3.10 pygame-ce==2.5.8 ale-py==0.12.1
    # their dependencies absent from the image
    hoptorch==0.1.4 pyvers==0.2.3 orjson==3.13.0 importlib-metadata==10.2.0 lazy-importer==0.1.0 farama-notifications==0.0.6
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two of one package stop the whole install there
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$python_version" --implementation cp \
    "${platforms[@]}" -d .whl "${wheels[@]}"
ls -l .whl
echo "$(du -sh .whl | cut -f1) in .whl: carry it (run's carry: [\".whl\"]); scripts/gpu_box.sh installs it"
