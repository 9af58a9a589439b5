# Is a freshly written file slower to read on this disk? Write the packed copy, then write the
# original again (same seed, same bytes), so that the original is now the newer of the two; cold
# rounds right away (a), and again after 150 s (b).
R=$OUT && export AUX=/tmp/aux MODELS=/tmp/hoist-models PYTHONUNBUFFERED=1 HF=0 BUILD_DIR=/tmp/hb
OUT=$R/ceil PACK=1 STAGES="ceilings" bash bench/packed.sh > $R/log-ceil.txt 2>&1
M=/tmp/hoist-models/qwen3-4b; sha1=$(sha256sum $M/*.safetensors | sha256sum)
rm -f $M/*.safetensors; /tmp/hb/tools/hoist-mkckpt --family qwen3 --preset qwen3-4b --out $M --seed 1 > /dev/null 2>&1; sync
echo "same bytes rewritten: $([[ "$sha1" == "$(sha256sum $M/*.safetensors | sha256sum)" ]] && echo yes || echo NO) at $(date +%T)" > $R/rewrite.txt
OUT=$R/cold-a PACK=1 RUNS_COLD=2 STAGES="cold" COLD_MODES="auto;direct" bash bench/packed.sh > $R/log-a.txt 2>&1
sleep 150
OUT=$R/cold-b PACK=1 RUNS_COLD=2 STAGES="cold" COLD_MODES="auto;direct" bash bench/packed.sh > $R/log-b.txt 2>&1
cat $R/rewrite.txt; for x in a b; do grep -E "reader|cold \| 0|faster" $R/cold-$x/PACKED.md; done
