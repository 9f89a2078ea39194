#!/usr/bin/env bash
# The worked example on the H200, every step (run from the repository root; README.md beside this explains it).
# Needs the wheels of .whl/ (transformers and kernelscope's own dependencies) when the machine lacks them.
set -u
EX=examples/repro_hf_decode
OUTD=${OUT:-/tmp/out}
mkdir -p "$OUTD" "$EX/h200" "$EX/prof"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
ks() { python3 -m mcp_server.faces.cli "$@"; }  # = kernelscope, without installing the package
step() { echo "== $(date -u +%T) $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$EX/h200/gpu.txt"
step "1. record the two traces"
python3 tools/record_hf_decode.py --out "$EX/traces" || exit 2
step "2. compare (sdpa = A, eager = B)"
ks compare "$EX/traces/hf_decode_sdpa.json.gz" "$EX/traces/hf_decode_eager.json.gz" --labels sdpa eager --json > "$EX/h200/compare.json"
ks budget "$EX/traces/hf_decode_sdpa.json.gz" "$EX/traces/hf_decode_eager.json.gz" --labels sdpa eager --json > "$EX/h200/budget.json"
step "3. repro the losing block (LlamaAttention of the eager run)"
ks repro make "$EX/traces/hf_decode_eager.json.gz" --module LlamaAttention --top 10 -o "$EX/repro" --overwrite --json > "$EX/h200/repro_make.json"
ks repro make "$EX/traces/hf_decode_eager.json.gz" --module LlamaAttention --top 10 -o "$EX/repro" --overwrite
step "4. replay vs trace"
ks repro run "$EX/repro" --iters 30 --detail --json > "$EX/h200/repro_run.json"
ks repro run "$EX/repro" --iters 30 --detail 2>&1 | tail -30
OP=$(python3 -c "import json;d=json.load(open('$EX/repro/ops.json'));print(next(o['id'] for o in d['ops'] if o['name']=='aten::bmm' and o['spec']))")
echo "slowest bmm with a spec: $OP"
step "5. ncu + classify + select on the replay of $OP"
ks ncu run --repro-op "$OP" --report "$EX/prof/$OP" --overwrite --json -- "$EX/repro" > "$EX/h200/ncu_run.json"
ks classify "$EX/prof/$OP.ncu-rep" --json > "$EX/h200/classify.json"
ks select "$EX/prof/$OP.ncu-rep" --json > "$EX/h200/select.json"
ks select "$EX/prof/$OP.ncu-rep" 2>&1 | head -20
step "6. the loop: validate the candidate, accept or revert"
rm -f "$EX/h200/ledger.db"
ks loop --repro-op "$OP" --profile "$EX/prof/$OP.ncu-rep" --proposals "$EX/proposals.toml" --ledger "$EX/h200/ledger.db" --json -- "$EX/repro" > "$EX/h200/loop.json"
ks ledger export --ledger "$EX/h200/ledger.db" --format md --output "$EX/h200/ledger.md" --overwrite
python3 -c "import json;d=json.load(open('$EX/h200/loop.json'));[print(s['proposal_id'],s['verdict'],s['decision'],s.get('why')) for s in d.get('steps',[])];print(d.get('stopped'), d.get('diagnosis'))"
step "done"
