# Run X call 2 (this tree): issue 17's four items side by side in one call, and the restore's
# head by kernel against 88317cc (old-src/), alternated. Hot: tp 1, tp 2 rank 1 (its default 8
# threads: both ranks' node share of this 16-core box) and tp 2 rank 1 on 16 threads (each rank's
# share on the 2-GPU kind), bench/ab.sh with this build on both sides (10 runs a case), each round
# against its own pinned-H2D ceiling. Restore: two daemons (old and new build) with host caches;
# 0, 0.05 and 0.5 s after `ctl release`, old and new alternated, 4 rounds; a ceiling before and
# after. Cold: the O_DIRECT reader (page cache dropped), then --read auto and --read direct, page
# cache dropped before each run. CUDA tests of this tree (the copy by kernel among them).
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
ob=/tmp/hb-old; tb=/tmp/hoist-test-build
( source tools/env.sh
  cmake -S old-src -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/ocmake.log 2>&1 && ninja -C $ob -j5 hoist > $A/obuild.log 2>&1 ) &
oldpid=$!
( source tools/env.sh
  cmake -S . -B $tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/tcmake.log 2>&1 &&
    ninja -C $tb -j5 transport_tests > $A/tbuild.log 2>&1 ) &
testpid=$!
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
wait $oldpid; wait $testpid
echo "builds: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
[[ -x $ob/launch/hoist ]] || { tail -20 $A/ocmake.log $A/obuild.log; exit 1; }
$tb/tests/transport_tests --gtest_filter='*Cuda*' > $A/t.log 2>&1; echo "cuda tests rc=$?" | tee $OUT/tests.txt
grep -E "^\[ +(OK|PASSED|SKIPPED|FAILED) " $A/t.log >> $OUT/tests.txt; grep -B2 -A8 "Failure" $A/t.log | head -40 >> $OUT/tests.txt
echo "tests: $(( $(date +%s) - t0 )) s"
RUNS=5 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $h $h $m > $OUT/hot.jsonl 2> $A/hot.err
python3 bench/summarize_ab.py $OUT/hot.jsonl | tee $OUT/hot.md
echo "hot: $(( $(date +%s) - t0 )) s"
cat $m/*.safetensors > /dev/null
$h load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
python3 bench/head_tail.py /tmp/tr.json "tp2r1 t16" > $OUT/head_tail.jsonl
$b/bench/hoist-bench-h2d 8 3 | tail -1 | sed 's/^{/{"kind":"ceiling_before_restore",/' | tee $OUT/restore_ceiling.jsonl
for v in old new; do
  hh=$h; [[ $v == old ]] && hh=$ob/launch/hoist
  rm -rf /tmp/sock-$v
  setsid $hh serve --model $m --host-cache --socket-dir /tmp/sock-$v --log-level warn > $A/serve-$v.log 2>&1 &
  echo $! > /tmp/pid-$v
done
for v in old new; do for i in $(seq 900); do [[ -S /tmp/sock-$v/rank-0.sock ]] && break; sleep 0.1; done; done
for round in 1 2 3 4; do for gap in 0 0.05 0.5; do for v in old new; do
  hh=$h; [[ $v == old ]] && hh=$ob/launch/hoist
  $hh ctl release --socket /tmp/sock-$v/rank-0.sock > /dev/null; sleep $gap
  echo "$v gap $gap: $($hh ctl restore --socket /tmp/sock-$v/rank-0.sock 2>&1 | tr '\n' ' ')" >> $OUT/restore.txt
done; done; done
$h ctl restore --socket /tmp/sock-new/rank-0.sock --verify >> $OUT/restore.txt 2>&1
$h ctl release --socket /tmp/sock-new/rank-0.sock > /dev/null
echo "new verify after release: $($h ctl restore --socket /tmp/sock-new/rank-0.sock --verify 2>&1 | tr '\n' ' ')" >> $OUT/restore.txt
for v in old new; do kill -TERM $(cat /tmp/pid-$v); done; wait 2>/dev/null
$b/bench/hoist-bench-h2d 8 3 | tail -1 | sed 's/^{/{"kind":"ceiling_after_restore",/' | tee -a $OUT/restore_ceiling.jsonl
cat $OUT/restore.txt
echo "restore: $(( $(date +%s) - t0 )) s"
sync; echo 3 > /proc/sys/vm/drop_caches
$b/bench/hoist-bench-io --threads 16 --chunk-mib 4 --depth 16 $m/*.safetensors 2>/dev/null | tee $OUT/io_ceiling.json
echo "reader: $(( $(date +%s) - t0 )) s"
RUNS=2 TEMP=cold CASES="--read auto;--read direct" bash bench/ab.sh $h $h $m > $OUT/cold.jsonl 2> $A/cold.err
python3 bench/summarize_ab.py $OUT/cold.jsonl | tee $OUT/cold.md
echo "done: $(( $(date +%s) - t0 )) s"
