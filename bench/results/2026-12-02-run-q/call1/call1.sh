# Run Q call 1 (tree 7074702 + uncommitted lab patch: LAB timings on stderr of the decoder's
# making; HOIST_LAB_WARM=1 warms malloc/pageable copy/func attribute at device open).
set -uo pipefail
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux1; mkdir -p $A /tmp/tr
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"; tail -3 $A/setup.log
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
warm() { cat "$1"/*.safetensors "$1"/*.bin > /dev/null 2>&1 || true; }
one() {  # label model envs... -- args...
  local label=$1 model=$2; shift 2
  local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  warm $model
  echo "== $label" >> $OUT/lab.txt
  env "${envs[@]}" $h load --model $model --log-level warn --report-json /tmp/r.json --trace /tmp/tr/$label.json "$@" > /tmp/log 2>&1
  echo "rc $?" >> $OUT/lab.txt
  grep LAB /tmp/log >> $OUT/lab.txt; grep -v LAB /tmp/log | tail -3 >> $OUT/lab.txt
  python3 -c "
import json; r=json.load(open('/tmp/r.json'))['ranks'][0]; ph=r['phases']
print(json.dumps({'label':'$label','ms':round(ph['total']['seconds']*1e3,2),'phases':{n:round(p['seconds']*1e3,2) for n,p in ph.items()}}))" >> $OUT/runs.jsonl
}
for i in 1 2 3 4; do
  one p$i-plain $m-packed X=1 -- --read auto
  one p$i-warm $m-packed HOIST_LAB_WARM=1 -- --read auto
  one p$i-eager $m-packed CUDA_MODULE_LOADING=EAGER -- --read auto
done
for i in 1 2; do one p$i-tp2 $m-packed X=1 -- --tp 2 --rank 1; one p$i-tp2warm $m-packed HOIST_LAB_WARM=1 -- --tp 2 --rank 1; done
for i in 1 2 3; do one o$i $m X=1 -- --read auto; done
echo "loads: $(( $(date +%s) - t0 )) s"
cut -c1-400 $OUT/runs.jsonl
for f in /tmp/tr/p*.json; do python3 bench/gaps.py $f $(basename $f .json); done > $OUT/gaps.jsonl 2>&1
tar -czf $OUT/traces.tgz -C /tmp tr
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl; cat $OUT/h2d.jsonl
echo "done: $(( $(date +%s) - t0 )) s"
