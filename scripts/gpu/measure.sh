#!/bin/bash
# Every GPU measurement the open issues ask for, in ONE device call (a lent machine gives a session 15 minutes,
# each start costing one or two): from the repository root, after scripts/gpu/fetch_wheels.sh here,
#   run(command="bash scripts/gpu/measure.sh", carry=[".whl"], timeout_s=560)
# What comes back under $OUT: env.txt, and one .txt (the printed table) per measurement, plus JSON where the
# benchmark writes it. The CPU rows of the causal table run on two cores of their own beside the GPU rows:
# on a 16-core machine that is the quiet 2-core measurement the causal issue asks for.
#   issue 44: bench_causal.py on cuda (TransformerLens 4.3 timed there too) and on 2 quiet CPU threads
#   issue 41: the 64/1,024/4,096-token graph against circuit-tracer on the GPU; the Gemma-2-2B-shaped capacity
set -u
. scripts/gpu/setup.sh
{ nvidia-smi -L; nproc; python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"
  /tmp/tlpy -c "import transformer_lens, transformers; print('TransformerLens site: transformers', transformers.__version__)"
  /tmp/ctpy -c "import circuit_tracer, transformers; print('circuit-tracer site: transformers', transformers.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
step() { name=$1; limit=$2; shift 2; echo "== $name (limit ${limit}s)"; timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; echo "rc $?" >> "$OUT/$name.txt"; tail -n 15 "$OUT/$name.txt"; }
( step causal_cpu 420 taskset -c 8,9 /tmp/tlpy benchmarks/bench_causal.py --device cpu --threads 2 --clock wall --json "$OUT/causal_cpu.json" ) &
step causal_cuda 150 taskset -c 0-5 /tmp/tlpy benchmarks/bench_causal.py --device cuda --threads 2 --json "$OUT/causal_cuda.json"
step graph_cuda 100 taskset -c 0-5 /tmp/cwpy benchmarks/bench_attribution_graph.py --tokens 64 1024 4096 --device cuda --threads 4 \
  --ctracer /tmp/ctpy --ctracer-max-tokens 1024 --ctracer-timeout 60
step capacity 220 taskset -c 0-5 /tmp/cwpy benchmarks/bench_graph_gpu_capacity.py --device cuda --budget-s 200 \
  --out "$OUT/gpu_capacity.json" --ctracer-python /tmp/ctpy
wait
