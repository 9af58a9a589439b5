R=$OUT && export AUX=/tmp/aux MODELS=/tmp/hoist-models PYTHONUNBUFFERED=1 HF=0 BUILD_DIR=/tmp/hb
OUT=$R/cold PACK=1 RUNS_COLD=3 STAGES="ceilings cold" COLD_MODES="auto;direct" bash bench/packed.sh > $R/log-cold.txt 2>&1
M=/tmp/hoist-models/qwen3-4b
for d in $M $M-packed; do echo "== $d"; ls -la $d; for f in $d/*.safetensors $d/*.bin; do [ -f $f ] && filefrag $f; done; done > $R/frag.txt 2>&1
df -h /tmp >> $R/frag.txt; mount | grep -E " / | /tmp " >> $R/frag.txt
H=/tmp/hb/launch/hoist; sync; echo 3 > /proc/sys/vm/drop_caches; $H load --model $M-packed --read direct --no-progress --report-json $R/packed-direct.json > $R/packed-direct.txt 2>&1
tail -c 2500 $R/log-cold.txt; cat $R/frag.txt | head -40
