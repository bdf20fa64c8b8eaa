#!/bin/bash
# How gelu-2l was trained (session 9): four candidate configurations side by side on one H100, through the
# device tool, which runs this from the repository root with $OUT as the folder whose files come back.
# runs/cache held the shipped tokenizer (attn-only-2l-12h's tokenizer.json) and the standard library
# encoded with it (training/corpus.py's split), so every candidate saw the held-out files the 12-head
# model was measured on. The best run's tar was over the 16 MB a returned file may have; its checkpoint,
# log and export were copied back one by one, then published with
#   python -m circuitwidgets.training.publish runs/gelu-2l gelu-2l --tokenizer runs/cache/tokenizer.json
set -u
nvidia-smi -L; python3 -c "import torch;print(torch.__version__, torch.cuda.is_available())"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
run() { name=$1; shift; timeout ${LIMIT:-500} python3 -m circuitwidgets.cli train --layers 2 --norm layernorm --act gelu --device cuda --eval-every 1000 --cache runs/cache -o runs/$name "$@" > runs/$name.out 2>&1; echo "$name rc=$?"; }
run A --heads 8 --d-model 256 --d-head 32 --mlp 1024 --lr 3e-3 --batch-size 32 --steps 16000 --decay-steps 4000 &
run B --heads 8 --d-model 256 --d-head 32 --mlp 1024 --lr 1e-2 --batch-size 32 --steps 16000 --decay-steps 4000 &
run C --heads 8 --d-model 256 --d-head 32 --mlp 1024 --lr 3e-3 --batch-size 64 --steps 16000 --decay-steps 4000 &
run D --heads 12 --d-model 128 --d-head 16 --mlp 512 --lr 3e-3 --batch-size 32 --steps 16000 --decay-steps 4000 &
wait
for n in A B C D; do echo "== $n"; tail -c 300 runs/$n.out; tail -n 1 runs/$n/log.jsonl | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print({k:r[k] for k in ('step','train_seconds','val_loss','icl_score')}, r.get('direct_logit_attribution',{}).get('share'), [max(x) for x in r['induction']], [max(x) for x in r['previous_token']])"; done
best=$(for n in A B C D; do tail -n 1 runs/$n/log.jsonl | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['val_loss'], '$n')"; done | sort -n | head -1 | cut -d' ' -f2)
echo "best: $best"
tar cf $OUT/best_$best.tar -C runs $best
for n in A B C D; do cp runs/$n/log.jsonl $OUT/log_$n.jsonl; done
