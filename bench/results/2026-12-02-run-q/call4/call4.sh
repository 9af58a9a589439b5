# Run Q call 4 (tree add54a3 + lab4.patch, uncommitted: LABT timestamps on stderr at each step
# after the pipeline's last slot): where a packed load's tail goes. 5 hot packed tp 1 loads,
# 3 original. At most 8 files.
set -uo pipefail
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux4; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
warm() { cat "$1"/*.safetensors "$1"/*.bin > /dev/null 2>&1 || true; }
for i in 1 2 3 4 5 6; do
  for which in packed orig; do
    [[ $which == orig && $i -gt 3 ]] && continue
    mm=$m; [[ $which == packed ]] && mm=$m-packed
    warm $mm
    $h load --model $mm --log-level warn --read auto --report-json /tmp/r.json > /tmp/log 2>&1
    echo "== $which $i rc $?" >> $OUT/lab.txt
    grep LABT /tmp/log >> $OUT/lab.txt
    python3 -c "
import json; r=json.load(open('/tmp/r.json'))['ranks'][0]; ph=r['phases']; t=ph['total']
print('TOTAL', round(t['seconds']*1e3,3), 'staging_free_end_after_total_start', round((ph['staging_free']['start_s']+ph['staging_free']['seconds']-t.get('start_s',0))*1e3,3))" >> $OUT/lab.txt
  done
done
python3 - $OUT/lab.txt <<'PY'
import sys, collections
runs=[]; cur=None
for l in open(sys.argv[1]):
    if l.startswith('=='): cur={'label':l.split()[1],'marks':[]}; runs.append(cur)
    elif l.startswith('LABT'): _,n,t=l.split(); cur['marks'].append((n,float(t)))
    elif l.startswith('TOTAL'): p=l.split(); cur['total']=float(p[1]); cur['sf_end']=float(p[3])
for r in runs:
    m=r['marks']; d=[(m[i][0], round(m[i][1]-m[i-1][1],3)) for i in range(1,len(m))]
    print(r['label'], 'total', r.get('total'), 'tail', round(r['total']-r['sf_end'],2) if 'total' in r else None, d)
PY
echo "done: $(( $(date +%s) - t0 )) s"
