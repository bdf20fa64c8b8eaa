#!/bin/bash
# Fetch, here, the Python packages the lent GPU machine lacks, as wheels for its Python 3.12, into .whl/
# (ignored: add `/.whl/` to .git/info/exclude). The device tool carries them (`carry: [".whl"]`, 31 MB beside the
# 34 MB tree: under its 64 MiB) and scripts/gpu/setup.sh installs them there in two separate sites, because the
# peers' pins clash: TransformerLens 4.3 wants transformers >= 5.9 (the machine's 5.17 does), circuit-tracer 0.5
# wants transformers <= 4.57.3 and huggingface_hub < 1 (so both travel, shadowing the machine's in that site only).
# Versions are those of our test environments (.venv for TransformerLens, .venv-peers/ctracer for circuit-tracer).
# Checked on 2026-11-28 by installing the same versions (cp311 builds) over transformers 5.17 / hub 1.33 /
# tokenizers 0.23.2 here: both sites import and run (TransformerLens's bench_causal rows, circuit-tracer's attribute).
set -eu
cd "$(dirname "$0")/../.."
plat="--python-version 3.12 --implementation cp --platform any"
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  plat="$plat --platform ${p}_x86_64"
done
get() { dir=$1; shift; mkdir -p ".whl/$dir"; python3 -m pip download -q --no-deps --only-binary=:all: $plat -d ".whl/$dir" "$@"; }
# in both sites
get common beartype==0.23.1 dill==0.4.1 multiprocess==0.70.19 typeguard==4.6.1 zstandard==0.25.0 fancy-einsum==0.0.3
# TransformerLens 4.3 (imports datasets at start-up; wandb and transformers-stream-generator are never imported)
get a transformer-lens==4.3.0 datasets==5.2.0 sniffio==1.3.1
# circuit-tracer 0.5 and its pins (nnsight imports opentelemetry at start-up)
get ct circuit-tracer==0.5.0 transformer-lens==3.2.1 transformers==4.57.3 huggingface_hub==0.36.2 tokenizers==0.22.2 \
  datasets==5.0.1 nnsight==0.8.1 greenlet==3.5.6 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 better-abc==0.0.3 googleapis-common-protos==1.76.0 opentelemetry-api==1.45.2 \
  opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
  opentelemetry-exporter-http-transport==0.66b2 opentelemetry-exporter-otlp-common==0.66b2 \
  opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2
du -sh .whl
