# Run X call 1: (1) hoist-bench-smcopy: host-to-device copies by a kernel reading mapped pinned
# memory, alone, beside the copy engine, and right after an 8 GiB free (issue 17 item 4);
# (2) hoist-bench-free's probe case (can a release tell when the driver's clearing is done?);
# (3) A/B of 88317cc (old-src/) against this tree (fill threads made at set-up: transport::Crew),
# alternated run by run, each round against its own pinned-H2D ceiling, and traced heads.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
ob=/tmp/hb-old
( source tools/env.sh
  cmake -S old-src -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/ocmake.log 2>&1 && ninja -C $ob -j6 hoist > $A/obuild.log 2>&1 ) &
oldpid=$!
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
ninja -C $b hoist-bench-smcopy hoist-bench-free > $A/benchbuild.log 2>&1 || tail -20 $A/benchbuild.log
$b/bench/hoist-bench-smcopy 8 | tee $OUT/smcopy.jsonl
$b/bench/hoist-bench-smcopy 8 "sm264,ce,mix60,mix80,free-ce,free-sm264,free-sm528,free-mix60,free-ce,free-sm264" | tee -a $OUT/smcopy.jsonl
echo "smcopy: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-free 8 "probe,malloc,probe,fresh,probe" | tee $OUT/free_probe.jsonl
echo "probe: $(( $(date +%s) - t0 )) s"
wait $oldpid
echo "old build: $(( $(date +%s) - t0 )) s"
m=$M/qwen3-4b; h=$b/launch/hoist
[[ -x $ob/launch/hoist ]] || { tail -20 $A/ocmake.log $A/obuild.log; exit 1; }
RUNS=6 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $ob/launch/hoist $h $m > $OUT/ab.jsonl 2> $A/ab.err
python3 bench/summarize_ab.py $OUT/ab.jsonl | tee $OUT/ab.md
echo "ab: $(( $(date +%s) - t0 )) s"
for a in "--tp 2 --rank 1 --cpu-bind none --threads 16" "--tp 2 --rank 1" ""; do
  for i in 1 2; do
    for hh in $ob/launch/hoist $h; do
      cat $m/*.safetensors > /dev/null
      $hh load --model $m $a --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
      python3 bench/head_tail.py /tmp/tr.json "$([[ $hh == $h ]] && echo new || echo old) [$a] $i" >> $OUT/head_tail.jsonl
    done
  done
done
$h load --model $m --tp 2 --rank 1 --verify --log-level warn --no-progress > /tmp/v.txt 2>&1
echo "verify tp2 rank1 rc=$? $(grep -c ' ok' /tmp/v.txt) ok lines" | tee -a $OUT/verify.txt
echo "done: $(( $(date +%s) - t0 )) s"
