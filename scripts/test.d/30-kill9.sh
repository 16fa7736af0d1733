#!/usr/bin/env bash
# Crash safety of checkpoints: train the copy task with a checkpoint every 2
# steps, SIGKILL it at random moments (many land mid-write), and after each
# kill check that the newest checkpoint loads (copy_task eval) and that
# --resume continues from exactly that step. Then a full disk: resuming into a
# directory on a tiny tmpfs (or under `ulimit -f` when mounting is not
# allowed) must stop with exit code 2 and one clear line, leaving the previous
# checkpoint intact and loadable.
# Usage: scripts/test.d/30-kill9.sh BUILD_DIR [KILLS]   (prints its figures)
set -euo pipefail
bin=${1:?usage: $0 BUILD_DIR [KILLS]}/bin/copy_task
kills=${2:-25}
[[ -x $bin ]] || { echo "kill9: $bin not built" >&2; exit 1; }

work=$(mktemp -d /tmp/attograd_kill9.XXXXXX)
mnt=$work/full
cleanup() { mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"; rm -rf "$work"; }
trap cleanup EXIT
ck=$work/ck
model=(--d-model 16 --heads 2 --d-ff 32 --enc-layers 1 --dec-layers 1 --max-len 10 --symbols 5 --min-length 2
       --max-length 6)
train=("${model[@]}" --batch-size 8 --schedule constant --lr 1e-3 --eval-every 0 --eval-size 8 --samples 0
       --threads 1 --checkpoint-every 2 --keep-last 2)

newest() {  # step of the newest complete checkpoint in $1 (both files present), or nothing
  local f s best=
  for f in "$1"/step-*.model.safetensors; do
    [[ -e $f ]] || continue
    s=${f##*/step-}; s=${s%%.*}
    [[ -e $1/step-$s.train.safetensors ]] && best=$((10#$s))
  done
  echo "$best"
}

# A first checkpoint, then kill -9 again and again, resuming each time.
"$bin" train "${train[@]}" --steps 2 --checkpoint-dir "$ck" > "$work/first.log"
recoveries=0 corrupt=0 midwrite=0 bad_resume=0
for ((i = 1; i <= kills; i++)); do
  before=$(newest "$ck")
  "$bin" train "${train[@]}" --steps 1000000 --checkpoint-dir "$ck" --resume > "$work/run.log" 2>&1 &
  pid=$!
  # Once it has resumed (startup is slow on a busy machine), kill it 0.05 .. 0.64 s into training.
  for ((w = 0; w < 400; w++)); do
    grep -q "^resumed from" "$work/run.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 6))$((RANDOM % 10))5"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  # The resumed run started from the newest checkpoint before it.
  grep -q "resumed from $ck/step-$(printf '%08d' "$before").model.safetensors at step $before" "$work/run.log" ||
    { ((++bad_resume)); echo "kill $i: run did not resume from step $before:"; head -3 "$work/run.log"; }
  compgen -G "$ck/*.tmp.*" > /dev/null && ((++midwrite))
  after=$(newest "$ck")
  if [[ -n $after ]] && "$bin" eval --checkpoint "$ck" --eval-size 4 --threads 1 > "$work/eval.log" 2>&1; then
    ((++recoveries))
  else
    ((++corrupt)); echo "kill $i: newest checkpoint (step ${after:-none}) does not load:"; cat "$work/eval.log"
  fi
done
# Training continues to the end after the last kill.
last=$(newest "$ck")
"$bin" train "${train[@]}" --steps $((last + 4)) --checkpoint-dir "$ck" --resume > "$work/final.log" 2>&1 ||
  { echo "kill9: the final resume from step $last failed:"; cat "$work/final.log"; exit 1; }
grep -q "^done: $((last + 4)) steps" "$work/final.log" || { echo "kill9: final run did not finish"; cat "$work/final.log"; exit 1; }
echo "killed $kills times, $recoveries recoveries, $corrupt corrupt checkpoints ($midwrite kills left a half-written" \
     "temporary file behind; the newest checkpoint was step $last)"

# Full disk: room for the copied checkpoint and a few KB more, not for another.
mkdir -p "$mnt"
final=$(newest "$ck")
pair=("$ck"/step-$(printf '%08d' "$final").{model,train}.safetensors)
used=$(du -ck "${pair[@]}" | tail -1 | cut -f1)
if mount -t tmpfs -o size=$((used + 24))k tmpfs "$mnt" 2>/dev/null; then
  how="a $((used + 24)) KB tmpfs"; limit=()
else
  how="ulimit -f $((used / 2))"; limit=(ulimit -f $((used / 2)))  # every checkpoint file is larger than this
fi
cp "${pair[@]}" "$mnt"/
was=$(newest "$mnt")
rc=0
( [[ ${#limit[@]} -eq 0 ]] || "${limit[@]}"
  exec "$bin" train "${train[@]}" --steps $((was + 50)) --keep-last 1000 --checkpoint-dir "$mnt" --resume --quiet ) \
  > "$work/full.out" 2> "$work/full.err" || rc=$?
fail_full() { echo "full disk ($how): $1"; echo "stderr:"; cat "$work/full.err"; exit 1; }
[[ $rc -eq 2 ]] || fail_full "exit code $rc, expected 2"
[[ $(wc -l < "$work/full.err") -eq 1 ]] || fail_full "expected exactly one line on stderr"
grep -Eq "^copy_task: error: .*(No space left on device|File too large)" "$work/full.err" || fail_full "unclear error"
[[ $(newest "$mnt") == "$was" ]] || fail_full "the newest complete checkpoint changed from step $was"
compgen -G "$mnt/*.tmp.*" > /dev/null && fail_full "a temporary file was left behind"
"$bin" eval --checkpoint "$mnt" --eval-size 4 --threads 1 > "$work/eval.log" 2>&1 ||
  fail_full "the previous checkpoint no longer loads: $(cat "$work/eval.log")"
echo "full disk ($how): exit 2 with '$(cut -c1-150 "$work/full.err")'; checkpoint step $was intact and loadable"
if (( corrupt || bad_resume || recoveries != kills )); then exit 1; fi
