# Run Y call 2 (main): issue 17's four items side by side, with bench/ab.sh's builds swapping order
# every round and each cold round rated against an O_DIRECT reader run at that round's start.
# 1. hoist-bench-ce: the copy engine beside 8 and 16 copying cores, writing into the ring the DMA
#    reads against ordinary memory it never reads (one stream).
# 2. Hot: tp 1, tp 2 rank 1 on 16 threads (each rank's share on the 2-GPU kind) and on 12, one
#    build on both sides (12 runs a case), and on 16 with 2 MiB fill chunks, each round against its own pinned-H2D ceiling; a traced
#    tp 2 rank 1 load's head and tail.
# 3. Restore: the daemon with a host cache, 0, 0.05 and 0.5 s after `ctl release`, 5 rounds.
# 4. Cold: 3 rounds of [reader, auto, direct, auto, direct] (page cache dropped before each).
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
lscpu > $OUT/cpu.txt
cat $m/*.safetensors > /dev/null
timeout 60 $b/bench/hoist-bench-ce --threads 8,16 --streams 1 --dsts ring,apart \
  --patterns contig,rows:9728:19456 --gib 8 --runs 5 $m/*.safetensors > $OUT/ce.jsonl 2>&1
cut -c1-150 $OUT/ce.jsonl
echo "ce: $(( $(date +%s) - t0 )) s"
RUNS=6 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1 --cpu-bind none --threads 16;--tp 2 --rank 1 --cpu-bind none --threads 12;--tp 2 --rank 1 --cpu-bind none --threads 16 --chunk-kib 2048" \
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
cut -c1-200 $OUT/restore.txt
echo "restore: $(( $(date +%s) - t0 )) s"
RUNS=3 TEMP=cold WARMUP=0 READER_BIN=$b/bench/hoist-bench-io CASES="--read auto;--read direct" \
  bash bench/ab.sh $h $h $m > $OUT/cold.jsonl 2> $A/cold.err
python3 bench/summarize_ab.py $OUT/cold.jsonl | tee $OUT/cold.md
grep reader $OUT/cold.jsonl
echo "done: $(( $(date +%s) - t0 )) s"
