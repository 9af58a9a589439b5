# Run Y call 1 (branch copy-streams, 4c52b9e: main + HOIST_COPY_STREAMS, never merged unless it
# pays; unset = main's code). Ran as: cd .bench-src && bash call.sh
# 1. hoist-bench-ce: the copy engine's rate beside 0/8/12/16 copying cores, contiguous and strided,
#    on 1, 2 and 4 streams (no loader).
# 2. CudaPipelineTest (every read mode against the reference) with HOIST_COPY_STREAMS=2, and a
#    --verify load of tp 2 rank 1 on 2 streams.
# 3. The loader, one binary, A/B by environment: 1 stream against 2, tp 2 rank 1 on 16 threads and
#    tp 1, each round against its own ceiling.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
tb=/tmp/build-tests
( source tools/env.sh
  cmake -S . -B $tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/tcmake.log 2>&1 \
    && ninja -C $tb -j6 transport_tests > $A/tbuild.log 2>&1 ) &
tpid=$!
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
lscpu > $OUT/cpu.txt
cat $m/*.safetensors > /dev/null
timeout 120 $b/bench/hoist-bench-ce --threads 0,8,12,16 --streams 1,2,4 --patterns contig,rows:9728:19456 \
  --gib 8 --runs 5 $m/*.safetensors > $OUT/ce.jsonl 2>&1
timeout 60 $b/bench/hoist-bench-ce --threads 16 --streams 1,2 --slots 8 --patterns rows:9728:19456 \
  --gib 8 --runs 5 $m/*.safetensors >> $OUT/ce.jsonl 2>&1
echo "ce: $(( $(date +%s) - t0 )) s"
cut -c1-160 $OUT/ce.jsonl
wait $tpid
t=$(find $tb -name transport_tests -type f | head -1)
if [[ -n "$t" ]]; then
  HOIST_COPY_STREAMS=2 timeout 120 $t --gtest_filter='Cuda*' > $OUT/cudatests.txt 2>&1; echo "cuda tests rc $?"
  tail -3 $OUT/cudatests.txt
else tail -20 $A/tbuild.log; fi
HOIST_COPY_STREAMS=2 $h load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --verify --no-progress > $OUT/verify.txt 2>&1
echo "verify rc $?"; grep -i "verif\|error" $OUT/verify.txt | head -5
echo "tests: $(( $(date +%s) - t0 )) s"
printf '#!/bin/sh\nHOIST_COPY_STREAMS=2 exec %s "$@"\n' $h > /tmp/hoist-s2; chmod +x /tmp/hoist-s2
CASES="--tp 2 --rank 1 --cpu-bind none --threads 16;--read auto;--tp 2 --rank 1 --cpu-bind none --threads 16 --slots 8"
RUNS=6 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="$CASES" \
  bash bench/ab.sh $h /tmp/hoist-s2 $m > $OUT/streams.jsonl 2> $A/streams.err
python3 bench/summarize_ab.py $OUT/streams.jsonl | tee $OUT/streams.md
tail -3 $A/streams.err
echo "done: $(( $(date +%s) - t0 )) s"
