#!/usr/bin/env bash
# The device check's rehearsal: the GPU image imitated on this machine, then both commands of
# docs/performance.md ("On a lent GPU") as the device would run them. Run it before every
# change to the check, and put its table and timings in docs/performance.md.
#
#   bash benchmarks/device/rehearsal.sh            # both parts at full size (CPU estimates)
#   bash benchmarks/device/rehearsal.sh --smoke    # both parts at the smoke size
#   PARTS=1 bash benchmarks/device/rehearsal.sh    # one part
#
# The imitation: Python 3.12 in a virtual environment of its own ($VENV, made once) with the
# image's jax 0.11.2, numpy 2.5.2 and sentencepiece 0.2.2 (KINDS.md's pip list), the rest of
# the image's packages at this repo's pins, protobuf as the registry serves it; torch only
# with TORCH=1 (the registry has the cu130 build only, ~3 GB). Then the carried wheels
# (.whl/, benchmarks/device/wheels.sh) installed with the docs' exact command into a fresh
# --target, and each part run with no network (unshare -n), a fresh HOME, the docs'
# PYTHONPATH and the device tool's 600 s limit (`timeout -s KILL`, as the tool kills).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${VENV:-/tmp/t2t_rehearsal_venv}
PY312=${PY312:-$(command -v python3.12 || echo /root/.pyenv/versions/3.12.1/bin/python3.12)}
PARTS=${PARTS:-1 2}
OUT=${OUT:-/tmp/t2t_rehearsal_out}
SMOKE=${1:-}

# What the carried wheels need from the image (wheels.sh prints the list), by name:
# the image's own versions are unknown here.
IMAGE_HAS="attrs click cloudpickle etils[epath,epy] joblib packaging psutil pyarrow pyyaml regex
           requests six tqdm typing-extensions wrapt"
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY312" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q jax==0.11.2 jaxlib==0.11.2 numpy==2.5.2 \
      sentencepiece==0.2.2 flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 \
      sacrebleu==2.6.0 absl-py==2.5.1 matplotlib==3.11.2 protobuf \
      $IMAGE_HAS
  if [[ "${TORCH:-0}" == 1 ]]; then "$VENV/bin/python" -m pip install -q torch==2.11.0; fi
fi
[[ -d .whl ]] || {
  echo "rehearsal.sh: no .whl/: run benchmarks/device/wheels.sh" >&2; exit 1; }

SITE=$(mktemp -d /tmp/t2t_rehearsal_site.XXXX)
HOME_DIR=$(mktemp -d /tmp/t2t_rehearsal_home.XXXX)
rm -rf "$OUT" && mkdir -p "$OUT"
# The docs' command, with the rehearsal's python and folders in place of the image's.
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
"$VENV/bin/python" -c 'import jax, numpy, google.protobuf as p; print(
    f"rehearsal: jax {jax.__version__}, numpy {numpy.__version__}, protobuf {p.__version__}")'

for part in $PARTS; do
  start=$SECONDS
  code=0
  # No network, a fresh HOME (no compilation cache, no ~/.config), the tool's kill at 600 s.
  unshare -n env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$HOME_DIR" PYTHONUNBUFFERED=1 \
      PYTHONPATH="$SITE:$ROOT" timeout -s KILL 600 \
      python3 benchmarks/device/check.py --part "$part" $SMOKE \
      --out "$OUT/part$part/device_check.jsonl" > "$OUT/part$part.out" 2>&1 || code=$?
  echo "part $part: exit $code after $((SECONDS - start)) s (the device tool allows 600)"
  cat "$OUT/part$part/device_check.txt" 2>/dev/null || tail -20 "$OUT/part$part.out"
done
rm -rf "$SITE" "$HOME_DIR"
