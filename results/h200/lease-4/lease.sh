#!/bin/bash
# One lease (issues 57 and 60): CUDA tests; Transformer-tiny's three seeds; a converged base run alone; the
# --runs-per-gpu auto probe; levers' eager step beside the graphs. Files back under $OUT.
T0=$(date +%s); END=$((T0 + ${BUDGET:-580}))
left() { echo $((END - $(date +%s))); }
log() { echo "[$(( $(date +%s) - T0 ))s $(date +%T)] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD ABLATE_DATA_DIR=$PWD/.dev/corpora PYTHONUNBUFFERED=1
AB="python3 -m ablate.cli"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 500 > $OUT/smi.csv &
log "1. CUDA tests"
timeout 100 python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_graphs.py tests/test_training.py > $OUT/tests.log 2>&1
TESTS=$?; tail -4 $OUT/tests.log; grep -E "FAILED|Error" $OUT/tests.log | head -5
GRAPHS=(); [ $TESTS -eq 0 ] || GRAPHS=(--set training.cuda_graphs=false)
log "2. tiny seeds 1-3 (graphs: ${GRAPHS[*]:-auto})"
nvidia-cuda-mps-control -d && echo "MPS started"
$AB run experiments/paper/transformer_tiny.yaml --seeds 1,2,3 --runs-per-gpu 3 --results /tmp/tiny "${GRAPHS[@]}" > $OUT/tiny.log 2>&1 &
TINY=$!
sleep 5
log "3. levers: the converged step, eager and graphs, side by side (beside the tiny runs)"
timeout 90 python3 benchmarks/levers.py --device cuda --experiment experiments/converged.yaml --set training.precision=bf16 --warmup 40 --steps 150 > $OUT/levers.log 2>&1; tail -4 $OUT/levers.log
while kill -0 $TINY 2>/dev/null && [ $(left) -gt 225 ]; do sleep 5; done
if kill -0 $TINY 2>/dev/null; then log "tiny still training: stopped"; kill -INT $TINY; sleep 20; fi
log "tiny:"; grep -E "BLEU|seed-|error|Error" $OUT/tiny.log | tail -12
log "4. a converged base run alone: pe baseline seed 1"
timeout $(( $(left) - 100 )) $AB run experiments/pe.yaml --only baseline --seeds 1 --results /tmp/alone "${GRAPHS[@]}" > $OUT/alone.log 2>&1
tail -3 $OUT/alone.log
python3 - <<'PY'
import json, glob
for f in glob.glob('/tmp/alone/*/runs/*/seed-*/result.json') + glob.glob('/tmp/tiny/*/runs/*/seed-*/result.json'):
    r = json.load(open(f))
    print(f, {k: r.get(k) for k in ("status", "steps", "stopped_by", "train_seconds", "wall_seconds", "step_ms", "cuda_graphs", "peak_memory_mib")}, r.get("scores"))
PY
log "5. --runs-per-gpu auto on table3's baseline (48 jobs)"
timeout $(( $(left) - 12 )) python3 -c "
from ablate.sweep import packing
print(packing.choose('experiments/table3.yaml', [], 'baseline', 48, 0, lambda s: print(s, flush=True)))" 2>&1 | tee $OUT/probe.log
log "done"
kill %1 2>/dev/null
tar czf $OUT/runs.tgz --exclude='*.pt' -C /tmp tiny alone 2>/dev/null; ls -la $OUT
