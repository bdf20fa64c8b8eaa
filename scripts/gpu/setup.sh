# Sourced first in every device call (repository root, `carry: [".whl"]`): installs scripts/gpu/fetch_wheels.sh's
# wheels into two sites and writes three launchers, one per environment:
#   /tmp/cwpy  circuitwidgets alone (the machine's torch, numpy, safetensors, tokenizers are all it needs)
#   /tmp/tlpy  + TransformerLens 4.3 over the machine's transformers 5.x (the causal benchmarks' peer)
#   /tmp/ctpy  + circuit-tracer 0.5 with its own transformers 4.57.3 and huggingface_hub 0.36 (the graphs' peer)
export PYTHONUNBUFFERED=1 REPO=$PWD
install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$1" "${@:2}" >/dev/null 2>&1 || echo "installing into $1 failed"; }
install /tmp/sa .whl/common/*.whl .whl/a/*.whl
install /tmp/sct .whl/common/*.whl .whl/ct/*.whl
launcher() { printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "$@"\n' "$2" > "$1"; chmod +x "$1"; }
launcher /tmp/cwpy "$REPO"
launcher /tmp/tlpy "/tmp/sa:$REPO"
launcher /tmp/ctpy "/tmp/sct:$REPO"
