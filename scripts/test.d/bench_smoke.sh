#!/usr/bin/env bash
# examples/bench at a few steps: its output lines have every field scripts/bench
# reads, and decoding with the KV cache gives the same tokens as without; each
# row of scripts/bench in its cheapest form (the lm row, the data-parallel row
# under mpirun when MPI is built, the bf16 rows or their skip line, PyTorch's
# side when torch is installed: tools/bench_torch_fast.py, which scripts/bench
# runs), read back by tools/bench_table.py. Checks the format only, never the
# timings.
# $1: the Release build dir.
set -euo pipefail
build=${1:?usage: bench_smoke.sh BUILD_DIR}
bin=$build/bin/bench
tools=$(dirname "$0")/../../tools
cmake --build "$build" --target bench >/dev/null
lines=$(mktemp); trap 'rm -f "$lines"' EXIT
fail() { echo "bench_smoke: $*" >&2; exit 1; }
re_num='[0-9]+(\.[0-9]+)?'

out=$("$bin" --config tiny --threads 1 --warmup 1 --steps 2)
echo "$out" | tee -a "$lines"
grep -Eq "^bench framework=attograd mode=train config=tiny threads=1 kernel=[A-Za-z0-9]+ steps=2 step_ms=$re_num tok_s=$re_num gflops=$re_num peak_rss_mb=$re_num peak_tensor_mb=$re_num precision=f32$" <<<"$out" \
  || fail "unexpected train line"
dec=$("$bin" --decode --config tiny --threads 1 --lengths 3,5 --decode-batch 4 --repeats 1)
echo "$dec" | tee -a "$lines"
[[ $(grep -c " cache=" <<<"$dec") == 4 ]] || fail "expected 4 decode lines"
grep -Eq "^bench framework=attograd mode=decode config=tiny threads=1 kernel=[A-Za-z0-9]+ batch=4 len=5 cache=no ms=$re_num tok_s=$re_num peak_rss_mb=$re_num same=yes$" <<<"$dec" \
  || fail "unexpected decode line"
if grep -q "same=no" <<<"$dec"; then fail "cached and uncached decoding differ"; fi
# The table script reads these lines (PyTorch's side absent: only the kernel row and our rows that need no peer).
# (The table is captured before grep reads it: `grep -q` in a pipe closes it early, and the writer's broken pipe fails the check.)
table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines") || fail "bench_table.py failed"
grep -q "OpenBLAS kernel" <<<"$table" || fail "bench_table.py has no kernel row"

# The shape overrides of scripts/bench --sweep: tok_s × step time is the
# tokens of a step, batch 4 × length 8.
small=(--config tiny --d-model 32 --len 8 --batch 4 --threads 1 --warmup 0 --steps 1)
tokens_per_step_is_32() {
  awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] } }
       END { t = f["tok_s"] * f["step_ms"] / 1000; exit !(t > 31.5 && t < 32.5) }' <<<"$1"
}
line=$("$bin" "${small[@]}")
echo "$line"
tokens_per_step_is_32 "$line" || fail "--len 8 --batch 4 did not give 32 tokens per step"
if "$bin" --config tiny --d-model 30 --steps 1 2>/dev/null; then fail "--d-model 30 (not a multiple of 4 heads) was accepted"; fi

lm=$("$bin" --config lm --threads 1 --warmup 0 --steps 1)
echo "$lm" | tee -a "$lines"
grep -Eq "^bench framework=attograd mode=train config=lm threads=1 kernel=[A-Za-z0-9]+ steps=1 step_ms=$re_num tok_s=$re_num gflops=$re_num peak_rss_mb=$re_num peak_tensor_mb=$re_num precision=f32$" <<<"$lm" \
  || fail "unexpected lm train line"

dp_line() {  # dp_line PROCS: the regex of a data-parallel line of tiny
  echo "^bench framework=attograd mode=dp config=tiny procs=$1 threads=1 kernel=[A-Za-z0-9]+ steps=1 step_ms=$re_num tok_s=$re_num allreduce_ms=$re_num allreduce_pct=$re_num peak_rss_mb=$re_num precision=f32$"
}
dp=$("$bin" --data-parallel --config tiny --threads 1 --warmup 0 --steps 1)
echo "$dp" | tee -a "$lines"
grep -Eq "$(dp_line 1)" <<<"$dp" || fail "unexpected data-parallel line"
if grep -q '^ATTOGRAD_MPI:BOOL=ON' "$build/CMakeCache.txt" && command -v mpirun >/dev/null; then
  mpi=(timeout -k 5 60 mpirun -np 2 --oversubscribe --bind-to none)
  if (( EUID == 0 )); then mpi+=(--allow-run-as-root); fi
  dp2=$("${mpi[@]}" "$bin" --data-parallel --config tiny --threads 1 --warmup 0 --steps 1)
  echo "$dp2" | tee -a "$lines"
  [[ $(grep -c "^bench " <<<"$dp2") == 1 ]] || fail "expected one line (rank 0's) from mpirun -np 2"
  grep -Eq "$(dp_line 2)" <<<"$dp2" || fail "unexpected data-parallel line from mpirun -np 2"
  table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines") || fail "bench_table.py failed"
  grep -q "tiny data-parallel: 2 procs × 1 thread" <<<"$table" || fail "bench_table.py has no data-parallel row"
else
  echo "bench_smoke: no MPI in the build or no mpirun: the 2-process data-parallel line is not checked"
  echo 'skip row=dp reason="MPI is not built"' >>"$lines"
  table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines") || fail "bench_table.py failed"
  grep -q "skipped: MPI is not built" <<<"$table" || fail "bench_table.py does not say the data-parallel row was skipped"
fi

# bf16 (--precision bf16): a bf16 train line where this CPU's bf16 products run
# native, else one skip line and no timing (trainer.h's plan_precision).
b16=$("$bin" --config lm --threads 1 --warmup 0 --steps 1 --precision bf16)
echo "$b16" | tee -a "$lines"
native_bf16=0
if grep -q "^skip row=bf16 reason=" <<<"$b16"; then
  [[ $(wc -l <<<"$b16") == 1 ]] || fail "a bf16 skip line came with other lines"
  table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines") || fail "bench_table.py failed"
  grep -q "bf16 training rows.*skipped" <<<"$table" || fail "bench_table.py does not say the bf16 rows were skipped"
else
  native_bf16=1
  grep -Eq "^bench framework=attograd mode=train config=lm threads=1 kernel=[A-Za-z0-9]+ steps=1 step_ms=$re_num tok_s=$re_num gflops=$re_num peak_rss_mb=$re_num peak_tensor_mb=$re_num precision=bf16$" <<<"$b16" \
    || fail "unexpected bf16 train line"
  rate=$("$bin" --config lm --threads 1 --warmup 0 --steps 1 --precision bf16 --sgemm-rate)
  grep -Eq "^bench framework=attograd mode=sgemm config=lm .* precision=bf16$" <<<"$rate" || fail "unexpected bf16 sgemm line"
  grep -q "library=native" <<<"$rate" || fail "the bf16 sgemm lines do not name the native kernel"
  head -n1 <<<"$rate" >>"$lines"
  table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines") || fail "bench_table.py failed"
  grep -q "lm bf16: ours bf16 vs ours f32" <<<"$table" || fail "bench_table.py has no bf16-vs-f32 row"
fi
if "$bin" --config lm --steps 1 --precision f16 2>/dev/null; then fail "--precision f16 was accepted"; fi

if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  fast=$tools/bench_torch_fast.py
  th=$(/usr/bin/python3 "$fast" --config tiny --threads 1,2 --warmup 0 --steps 1 --mkldnn off)
  th+=$'\n'$(/usr/bin/python3 "$fast" --config lm --threads 1 --warmup 0 --steps 1)
  echo "$th" | tee -a "$lines"
  torch_line() {  # torch_line CONFIG THREADS MKLDNN OMP_WAIT PRECISION
    echo "^bench framework=pytorch mode=train config=$1 threads=$2 kernel=[A-Za-z0-9]+ mkldnn=$3 omp_wait=$4 interop=1 steps=1 step_ms=$re_num tok_s=$re_num gflops=$re_num peak_rss_mb=$re_num form=stock foreach=on precision=$5$"
  }
  grep -Eq "$(torch_line tiny 2 off PASSIVE f32)" <<<"$th" || fail "unexpected PyTorch line (tiny, 2 threads: PASSIVE wait)"
  grep -Eq "$(torch_line lm 1 on '[A-Za-z]+' f32)" <<<"$th" || fail "unexpected PyTorch lm line"
  if (( native_bf16 )); then
    tb=$(/usr/bin/python3 "$fast" --config lm --threads 1 --warmup 0 --steps 1 --precision bf16)
    echo "$tb" | tee -a "$lines"
    grep -Eq "$(torch_line lm 1 on '[A-Za-z]+' bf16)" <<<"$tb" || fail "unexpected PyTorch autocast lm line"
  fi
  line=$(/usr/bin/python3 "$fast" "${small[@]}")
  echo "$line"
  tokens_per_step_is_32 "$line" || fail "bench_torch_fast.py --len 8 --batch 4 did not give 32 tokens per step"
  table=$(/usr/bin/python3 "$tools/bench_table.py" "$lines")
  echo "$table"
  rows=("tiny: train tok/s" "lm: train tok/s" "PyTorch settings")
  if (( native_bf16 )); then rows+=("lm bf16: train tok/s, ours vs PyTorch autocast"); fi
  for row in "${rows[@]}"; do
    grep -q "$row" <<<"$table" || fail "bench_table.py has no '$row' row"
  done
else
  echo "bench_smoke: no torch in /usr/bin/python3: PyTorch's side is not checked"
fi
echo "bench_smoke: ok"
