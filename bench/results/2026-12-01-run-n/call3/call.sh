# Does the disk read incompressible bytes slower? The same O_DIRECT reader over: an original shard,
# a packed shard, 4 GiB of /dev/urandom, a fresh copy of the original shard; 3 rounds, alternated.
set -u
M=/tmp/hoist-models/qwen3-4b; B=/tmp/hb/bench/hoist-bench-io
head -c 4273378368 /dev/urandom > /tmp/rand.bin; cp $M/model-00001-of-00002.safetensors /tmp/orig-copy.bin; sync
for i in 1 2 3; do
  for f in $M/model-00001-of-00002.safetensors $M-packed/packed-00001.bin /tmp/rand.bin /tmp/orig-copy.bin; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    echo "round $i $f $($B --threads 16 --chunk-mib 4 --depth 16 $f 2>/dev/null)"
  done
done | tee $OUT/disk.txt
