#!/usr/bin/env bash
# The hostile-input sweep (issue 29; the probe it came from is
# shared/reviews/reliability-probe.md): crafted checkpoints (sizes that wrap,
# B1; a shape larger than its bytes, B2; 10^8 layers, B5; NaN weights;
# truncated; another program's), hostile flag values (=false booleans, junk
# after a number, hex, a negative size), endless inputs (/dev/zero,
# /dev/urandom) and a checkpoint directory holding another run, against lm,
# copy_task, translate and heads_study. Each probe runs under a timeout and a
# 4 GB `ulimit -v` and must end as documented: a refusal is exit code 2 with
# one line on stderr; never a signal (134, 139), a timeout or a second line.
# Prints each failed probe (every probe with HOSTILE_VERBOSE=1) and
# "hostile sweep: N probes, N ok, N failed".
# fuzz/craft.py trains the tiny checkpoints (2 steps, d_model 16) and crafts
# the variants.
# Usage: scripts/test.d/25-hostile.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
bin=$build/bin
craft=$(cd "$(dirname "$0")/../.." && pwd)/fuzz/craft.py
for p in lm copy_task translate heads_study; do
  [[ -x $bin/$p ]] || { echo "hostile: $bin/$p not built" >&2; exit 1; }
done
start=$SECONDS
work=$(mktemp -d /tmp/attograd_hostile.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"  # whatever a probe writes by default lands here
timeout 300 python3 "$craft" train "$build" "$work/base"
text=$work/base/text.txt
big=4611686018427387904  # 2^62

probes=0 passed=0
# run CMD...: runs it under the limits; sets rc, and leaves stdout and stderr in $work/out, $work/err.
run() {
  rc=0
  (ulimit -v 4000000; exec timeout -k 2 10 "$@") < /dev/null > "$work/out" 2> "$work/err" || rc=$?
}
# verdict NAME OK WHY: counts a probe; prints it when it failed.
verdict() {
  probes=$((probes + 1))
  if [[ $2 == 1 ]]; then
    passed=$((passed + 1))
    [[ -z ${HOSTILE_VERBOSE:-} ]] || echo "ok $1: $(head -c 300 "$work/err")"
  else
    echo "FAILED $1: $3"
    sed 's/^/    stderr: /' "$work/err" | head -3
  fi
}
# refused_naming NAME PHRASE CMD...: exit code 2, exactly one line on stderr, naming PHRASE.
refused_naming() {
  local name=$1 phrase=$2 lines ok=0
  shift 2
  run "$@"
  lines=$(wc -l < "$work/err")
  (( rc == 2 && lines == 1 )) && grep -qF -- "$phrase" "$work/err" && ok=1
  verdict "$name" "$ok" "exit $rc, $lines line(s) on stderr (want exit 2, one line${phrase:+ naming $phrase})"
}
# refused NAME CMD...: exit code 2 and exactly one line on stderr.
refused() {
  refused_naming "$1" "" "${@:2}"
}

# A copy of a base checkpoint directory (lm, copy, translate) with its model file edited by craft.py.
# variant NAME BASE CRAFT ARGS...: sets crafted[NAME] to the directory (no command substitution, so
# that set -e stops the sweep when a craft fails instead of probing an unmodified checkpoint).
declare -A crafted
variant() {
  local dir=$work/v/$1
  mkdir -p "$work/v"
  cp -r "$work/base/$2" "$dir"
  timeout 60 python3 "$craft" "$3" "$dir/step-00000002.model.safetensors" "${@:4}"
  crafted[$1]=$dir
}

# ---- crafted checkpoints, each into every program that loads its family ----
for base in lm copy translate; do
  if [[ $base == lm ]]; then vocab=(vocab=$big d_model=1 heads=1) layers=layers=100000000
  else vocab=(tgt_vocab=$big d_model=1 heads=1) layers=enc_layers=100000000; fi
  variant "$base-b1-d-ff" "$base" config d_ff=$big
  variant "$base-b1-vocab" "$base" config "${vocab[@]}"
  variant "$base-b5-layers" "$base" config "$layers"
  variant "$base-b2-shape" "$base" huge
  variant "$base-nan" "$base" nan
  variant "$base-truncated" "$base" truncate 3000
done
for kind in b1-d-ff b1-vocab b5-layers b2-shape nan truncated; do
  refused "lm sample, $kind" "$bin/lm" sample --checkpoint "${crafted[lm-$kind]}" --max-len 4 --threads 1
  refused "lm eval, $kind" "$bin/lm" eval --checkpoint "${crafted[lm-$kind]}" --text "$text" --threads 1
  refused "copy_task eval, $kind" "$bin/copy_task" eval --checkpoint "${crafted[copy-$kind]}" --threads 1
  refused "translate, $kind" "$bin/translate" translate --checkpoint "${crafted[translate-$kind]}" --threads 1 one
  refused "heads_study --inspect, $kind" "$bin/heads_study" --inspect "${crafted[translate-$kind]}" --threads 1 \
    --out "$work/inspect"
  refused "heads_study --convert-gqa, $kind" "$bin/heads_study" --convert-gqa "${crafted[translate-$kind]}" \
    --kv-heads 1 --to "$work/gqa.model.safetensors" --threads 1
done
refused "lm sample, a translate checkpoint" "$bin/lm" sample --checkpoint "$work/base/translate" --max-len 4
refused "copy_task eval, an lm checkpoint" "$bin/copy_task" eval --checkpoint "$work/base/lm"
refused "translate, a copy_task checkpoint" "$bin/translate" translate --checkpoint "$work/base/copy" one
refused "heads_study --inspect, an lm checkpoint" "$bin/heads_study" --inspect "$work/base/lm" --out "$work/inspect"

# ---- flags ----
tiny=(--threads 1 --steps 2 --warmup 1 --eval-every 0 --d-model 16 --heads 2 --d-ff 32 --batch-size 4 --samples 0)
lm_tiny=(train --context 16 --layers 1 "${tiny[@]}" --text)  # then the text
s2s_tiny=(train --enc-layers 1 --dec-layers 1 --eval-size 8 "${tiny[@]}")
for value in 1e-3abc 5e-4,0.1 "0.003 # peak" 0x10; do
  refused "lm train --lr '$value'" "$bin/lm" "${lm_tiny[@]}" "$text" --lr "$value"
done
refused "lm train --dropout 0x10" "$bin/lm" "${lm_tiny[@]}" "$text" --dropout 0x10
refused "copy_task train --lr 1e-3abc" "$bin/copy_task" "${s2s_tiny[@]}" --lr 1e-3abc
refused "translate train --dropout 0x10" "$bin/translate" "${s2s_tiny[@]}" --dropout 0x10
refused "lm sample --top-p 1e-3abc" "$bin/lm" sample --checkpoint "$work/base/lm" --top-p 1e-3abc
refused "translate --length-penalty 0.6x" "$bin/translate" translate --checkpoint "$work/base/translate" \
  --length-penalty 0.6x one
refused "heads_study --seeds 0x10" "$bin/heads_study" --quick --seeds 0x10 --out "$work/heads"
refused "lm eval --eval-size -5" "$bin/lm" eval --checkpoint "$work/base/lm" --text "$text" --eval-size -5
refused "lm train --quiet=maybe" "$bin/lm" "${lm_tiny[@]}" "$text" --quiet=maybe
# --flag=false is the flag off: the run succeeds with the default's parameter count.
params() { grep -Eo '[0-9]+ parameters' "$work/out" | head -1 || true; }
# same_as_default NAME FLAG CMD...: runs CMD, then CMD FLAG.
same_as_default() {
  local name=$1 flag=$2 want ok=0
  shift 2
  run "$@" --checkpoint-dir "$work/default-$probes"
  want=$(params)
  run "$@" --checkpoint-dir "$work/flag-$probes" "$flag"
  [[ $rc == 0 && -n $want && $(params) == "$want" ]] && ok=1
  verdict "$name" "$ok" "exit $rc, '$(params)' (the default: '$want')"
}
same_as_default "lm train --untied=false" --untied=false "$bin/lm" "${lm_tiny[@]}" "$text"
same_as_default "copy_task train --tie-embeddings=false" --tie-embeddings=false "$bin/copy_task" "${s2s_tiny[@]}"

# ---- endless inputs ----
for dev in /dev/zero /dev/urandom; do
  refused_naming "lm train --text $dev" "$dev" "$bin/lm" "${lm_tiny[@]}" "$dev"
  refused_naming "lm eval --text $dev" "$dev" "$bin/lm" eval --checkpoint "$work/base/lm" --text "$dev"
  refused_naming "translate --input $dev" "$dev" "$bin/translate" translate --checkpoint "$work/base/translate" \
    --input "$dev"
  refused_naming "translate eval --split $dev" "$dev" "$bin/translate" eval --checkpoint "$work/base/translate" \
    --split "$dev"
done

# ---- a checkpoint directory that holds another run ----
other=$work/other.txt
tr 'a-z' 'b-za' < "$text" > "$other"
cp -r "$work/base/lm" "$work/taken-lm"
cp "$work/taken-lm/tokenizer.json" "$work/tokenizer-before.json"
refused "lm train into another run's directory" "$bin/lm" "${lm_tiny[@]}" "$other" --steps 3 \
  --checkpoint-dir "$work/taken-lm"
verdict "lm train into another run's directory keeps its tokenizer" \
  "$(cmp -s "$work/taken-lm/tokenizer.json" "$work/tokenizer-before.json" && echo 1 || echo 0)" "tokenizer.json replaced"
refused "lm train --resume=false into another run's directory" "$bin/lm" "${lm_tiny[@]}" "$text" --steps 3 \
  --checkpoint-dir "$work/taken-lm" --resume=false
cp -r "$work/base/copy" "$work/taken-copy"
refused "copy_task train --reverse into another run's directory" "$bin/copy_task" "${s2s_tiny[@]}" --reverse \
  --checkpoint-dir "$work/taken-copy"
refused "copy_task train into lm's directory" "$bin/copy_task" "${s2s_tiny[@]}" --checkpoint-dir "$work/taken-lm"

echo "hostile sweep: $probes probes, $passed ok, $((probes - passed)) failed ($((SECONDS - start)) s)"
(( passed == probes ))
