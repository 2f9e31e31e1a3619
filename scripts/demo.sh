#!/usr/bin/env bash
# The main job on a fresh machine, with no download: builds megaqwen, writes a synthetic model with
# Qwen3-0.6B's exact shapes (seeded random weights, the real Qwen3 tokenizer from ../shared when
# present), generates from it, checks the best device's engine against the CPU reference (megaqwen
# verify; on a machine without a GPU that is the CPU engine's decode path against its batched prefill),
# and benchmarks prefill and decode on it.
# MEGAQWEN_PRESET picks another shape (tiny, qwen3-1.7b, qwen3-4b); MEGAQWEN_MODEL uses a real folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bin=build/megaqwen
model="${MEGAQWEN_MODEL:-}"
if [ -z "$model" ]; then
  preset="${MEGAQWEN_PRESET:-qwen3-0.6b}"
  model="build/models/synth-$preset"
  tokenizer=()
  [ -f ../shared/models/qwen3-0.6b/tokenizer.json ] && tokenizer=(--tokenizer ../shared/models/qwen3-0.6b)
  [ -f "$model/model.safetensors" ] || "$bin" synth --preset "$preset" --seed 0 --out "$model" "${tokenizer[@]}"
fi
"$bin" info --model "$model"
prompt=(--ids "785 3974 13876 38835 34208 916 279 15678 5562 13")
[ -f "$model/tokenizer.json" ] && prompt=(--prompt "The quick brown fox jumps over the lazy dog.")
"$bin" generate --model "$model" "${prompt[@]}" -n 16 --greedy
"$bin" verify --model "$model" --device auto --positions 48 --decode 16 --generate 16
mkdir -p build/bench
"$bin" bench --model "$model" --device auto --prompt-len 64 --depth 1,512 --tokens 16 --repeats 3 \
  --json build/bench/demo.json
