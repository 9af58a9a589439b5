# Run X call 3 (the final tree, whose code outside bench/ is 88317cc's): issue 17's four items
# side by side in one call. Hot: tp 1, tp 2 rank 1 (its default 8
# threads: both ranks' node share of this 16-core box) and tp 2 rank 1 on 16 threads (each rank's
# share on the 2-GPU kind), bench/ab.sh with this build on both sides (10 runs a case), each round
# against its own pinned-H2D ceiling. Restore: the daemon with a host cache; 0, 0.05 and 0.5 s
# after `ctl release`, 5 rounds; a ceiling before and after. Cold: the O_DIRECT reader (page cache
# dropped), then --read auto and --read direct, page cache dropped before each run.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
RUNS=5 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $h $h $m > $OUT/hot.jsonl 2> $A/hot.err
python3 bench/summarize_ab.py $OUT/hot.jsonl | tee $OUT/hot.md
echo "hot: $(( $(date +%s) - t0 )) s"
cat $m/*.safetensors > /dev/null
$h load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
python3 bench/head_tail.py /tmp/tr.json "tp2r1 t16" > $OUT/head_tail.jsonl
$b/bench/hoist-bench-h2d 8 3 | tail -1 | sed 's/^{/{"kind":"ceiling_before_restore",/' | tee $OUT/restore_ceiling.jsonl
sd=/tmp/sock-r; rm -rf $sd
setsid $h serve --model $m --host-cache --socket-dir $sd --log-level warn > $A/serve.log 2>&1 &
pid=$!
for i in $(seq 900); do [[ -S $sd/rank-0.sock ]] && break; sleep 0.1; done
for round in 1 2 3 4 5; do for gap in 0 0.05 0.5; do
  $h ctl release --socket $sd/rank-0.sock > /dev/null; sleep $gap
  echo "gap $gap: $($h ctl restore --socket $sd/rank-0.sock 2>&1 | tr '\n' ' ')" >> $OUT/restore.txt
done; done
$h ctl release --socket $sd/rank-0.sock > /dev/null
echo "verify after release: $($h ctl restore --socket $sd/rank-0.sock --verify 2>&1 | tr '\n' ' ')" >> $OUT/restore.txt
kill -TERM $pid; wait $pid 2>/dev/null
$b/bench/hoist-bench-h2d 8 3 | tail -1 | sed 's/^{/{"kind":"ceiling_after_restore",/' | tee -a $OUT/restore_ceiling.jsonl
cat $OUT/restore.txt
echo "restore: $(( $(date +%s) - t0 )) s"
sync; echo 3 > /proc/sys/vm/drop_caches
$b/bench/hoist-bench-io --threads 16 --chunk-mib 4 --depth 16 $m/*.safetensors 2>/dev/null | tee $OUT/io_ceiling.json
echo "reader: $(( $(date +%s) - t0 )) s"
RUNS=2 TEMP=cold CASES="--read auto;--read direct" bash bench/ab.sh $h $h $m > $OUT/cold.jsonl 2> $A/cold.err
python3 bench/summarize_ab.py $OUT/cold.jsonl | tee $OUT/cold.md
echo "done: $(( $(date +%s) - t0 )) s"
