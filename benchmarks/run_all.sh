#!/usr/bin/env bash
# Runs every benchmark with modest sizes and appends JSON lines to $OUT
# (default benchmarks/results/cpu.jsonl, truncated first), then prints the tables.
# About 10 minutes on 2 CPU cores when the machine is otherwise idle.
#
#   bash benchmarks/run_all.sh                  # CPU suite
#   PYTHON=/work/venv-bench/bin/python OUT=/tmp/x.jsonl bash benchmarks/run_all.sh
#   BIG=1 bash benchmarks/run_all.sh            # also the big model (1024 tokens; +5 min)
#   GPU=1 OUT=benchmarks/results/gpu.jsonl bash benchmarks/run_all.sh   # accelerator sizes
#
# Needs torch for the peer: pip install -r requirements-bench.txt (ideally in its own venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-benchmarks/results/cpu.jsonl}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
export PYTHONWARNINGS=ignore
# The machine and its load before and after, as benchmarks/shared/harness.py describes it (every
# record carries the same description, its date and the load when it was written).
"$PYTHON" -m benchmarks.shared.harness >&2

"$PYTHON" -m benchmarks.peers.matmul_peak --out "$OUT"
if [[ "${GPU:-0}" == 1 ]]; then
  "$PYTHON" -m benchmarks.peers.matmul_peak --dtype bfloat16 --n 8192 --out "$OUT"
  "$PYTHON" -m benchmarks.peers.train_step --sizes base,big --tokens 4096,25600 --length 64 \
      --steps 10 --rounds 3 --torch-compile base,big --out "$OUT"
  "$PYTHON" -m benchmarks.peers.decode --sizes base --batch 128 --src-len 32 --max-len 40 \
      --rounds 3 --out "$OUT"
else
  # Training: 4096 target tokens = 64 rows x 64 (source and target); tiny also torch.compile'd.
  "$PYTHON" -m benchmarks.peers.train_step --sizes tiny --tokens 4096 --length 64 \
      --steps 3 --rounds 2 --torch-compile tiny --torch-threads auto --out "$OUT"
  "$PYTHON" -m benchmarks.peers.train_step --sizes base --tokens 4096 --length 64 \
      --steps 1 --rounds 2 --torch-compile none --torch-threads 0 --out "$OUT"
  if [[ "${BIG:-0}" == 1 ]]; then
    "$PYTHON" -m benchmarks.peers.train_step --sizes big --tokens 1024 --length 64 \
        --steps 1 --rounds 2 --torch-compile none --torch-threads 0 --out "$OUT"
  fi
  # Decoding: beam 4 (alpha 0.6) and greedy, random weights, every hypothesis to max length.
  "$PYTHON" -m benchmarks.peers.decode --sizes tiny --batch 32 --src-len 32 --max-len 40 \
      --rounds 3 --out "$OUT"
  "$PYTHON" -m benchmarks.peers.decode --sizes base --batch 16 --src-len 32 --max-len 32 \
      --rounds 2 --out "$OUT"
fi
"$PYTHON" -m benchmarks.peers.matmul_peak --out "$OUT"
"$PYTHON" -m benchmarks.shared.harness >&2
"$PYTHON" -m benchmarks.shared.summarize "$OUT"
