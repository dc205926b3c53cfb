#!/bin/bash
# The device checks a lent GPU owes (issue 60 first, then Transformer-tiny's seeds), as one script against the
# lease's clock. Run on the lent machine from the repository root, with Python wheels in .whl/ and the Multi30k
# files in .dev/corpora/multi30k (results/h200/README.md, the fourth lease, says how they travel):
#
#     BUDGET=560 bash scripts/gpu_lease.sh      # seconds this command may take; files land in $OUT
#
# 1. the CUDA tests (graphs against eager); 2. a converged run alone with graphs, to its final BLEU;
# 3. `--runs-per-gpu auto`'s probe on table3; 4. `ablate bench` on CUDA; 5. Transformer-tiny's seeds until the end.
# Each step gets a deadline from what is left, and what it wrote comes back even when one is cut.
T0=$(date +%s); END=$((T0 + ${BUDGET:-560})); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
left() { echo $((END - $(date +%s))); }
log() { echo "[$(( $(date +%s) - T0 ))s $(date +%T)] $*"; }
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD ABLATE_DATA_DIR=$PWD/.dev/corpora PYTHONUNBUFFERED=1
AB="python3 -m ablate.cli"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 500 > "$OUT/smi.csv" &
SMI=$!
log "1. CUDA tests"
timeout 100 python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_graphs.py tests/test_training.py \
    > "$OUT/tests.log" 2>&1; tail -3 "$OUT/tests.log"
log "2. a converged run alone, with graphs: pe's baseline, seed 1"
timeout $(( $(left) * 2 / 5 )) $AB run experiments/pe.yaml --only baseline --seeds 1 --results /tmp/alone \
    > "$OUT/alone.log" 2>&1; tail -3 "$OUT/alone.log"
log "3. --runs-per-gpu auto on table3's baseline"
timeout $(( $(left) / 3 )) python3 -c "from ablate.sweep import packing
print(packing.choose('experiments/table3.yaml', [], 'baseline', 48, 0, lambda s: print(s, flush=True)))" \
    2>&1 | tee "$OUT/probe.log"
log "4. ablate bench on CUDA"
timeout $(( $(left) / 3 )) $AB bench experiments/pe.yaml --device cuda --max-minutes 1 --results /tmp/bench \
    > "$OUT/bench.log" 2>&1; tail -8 "$OUT/bench.log"
log "5. Transformer-tiny's seeds until the end"
timeout $(( $(left) - 15 )) $AB run experiments/paper/transformer_tiny.yaml --seeds 1,2,3 --runs-per-gpu 3 \
    --results /tmp/tiny > "$OUT/tiny.log" 2>&1; tail -4 "$OUT/tiny.log"
kill $SMI 2>/dev/null
tar czf "$OUT/runs.tgz" --exclude='*.pt' -C /tmp alone tiny bench 2>/dev/null
log "done"; ls -la "$OUT"
