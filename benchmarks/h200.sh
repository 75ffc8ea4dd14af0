#!/usr/bin/env bash
# The GPU session, the same way every time.  Run on the GPU machine from the repository root:
#
#   bash benchmarks/h200.sh check   # CUDA tests, the GPU and cpu_threads benchmarks
#   bash benchmarks/h200.sh tests [PATH...]  # the CUDA tests alone, or those under PATHs
#   bash benchmarks/h200.sh newcomer  # examples and verify from the root, cold compile times, a
#                                     # cold quick sweep + verify
#   bash benchmarks/h200.sh kernels # every CUDA kernel checked and timed, tuning variants beside the defaults
#   bash benchmarks/h200.sh sweep   # the reference sweep (sweeps/default.yaml) + verify; may
#                                   # take two calls: see below
#   bash benchmarks/h200.sh stable [N]  # two sweeps back to back, compared (N such checks)
#   bash benchmarks/h200.sh recheck # the committed CONFIG.soft's boundaries timed again
#   bash benchmarks/h200.sh pair    # two reference sweeps back to back, then compared: run it
#                                   # again at once until it compares (about three calls)
#   bash benchmarks/h200.sh compare # the last two finished reference sweeps, compared
#   bash benchmarks/h200.sh dense   # matmul at every 1-2 n from 96 to 200 (sweeps/matmul-dense.yaml)
#   bash benchmarks/h200.sh placement [PROFILE]  # whole-graph placement against per-op, all-CPU
#                                   # and all-CUDA plans, and the chain-crossover figure; PROFILE
#                                   # (default ./CONFIG.soft) is this machine's, with [costs]
#   bash benchmarks/h200.sh launch [PROFILE]  # the host's time to issue a GPU step, written into
#                                   # PROFILE's [bus] launch_us (a profile from before the sweep
#                                   # measured it; default ./CONFIG.soft)
#   bash benchmarks/h200.sh training [PROFILE]  # a training step compiled as one plan against
#                                   # hand-written numpy and CuPy loops (PROFILE as above)
#   bash benchmarks/h200.sh switch  # what a GPU->CPU hand-off inside a plan costs beyond its
#                                   # copy (extra/switch_cost.py: k = 1 and 7, each plan's time)
#   bash benchmarks/h200.sh switchcal [PROFILE]  # the same hand-off by the value's size, written
#                                   # into PROFILE's [bus] switch_us (a profile from before the
#                                   # sweep measured it; default ./CONFIG.soft)
#   bash benchmarks/h200.sh trace   # mixed plans' host time per step, under the quick profile
#                                   # (extra/step_trace.py: where a hand-off's time goes)
#   bash benchmarks/h200.sh verify  # what reads the quick profile, in one call, tarred into
#                                   # verify.tgz: GPU tests, pool states, placement, training
#                                   # steps, vs_torch (each part capped; about 560 s in all;
#                                   # VERIFY_SKIP="cuda-tests pool-states" leaves parts out,
#                                   # VERIFY_VSTORCH_S caps vs_torch and VERIFY_LIMIT_S names the
#                                   # call's limit, for a short budget)
#   bash benchmarks/h200.sh quick   # this machine's quick profile and `softcuda verify` of it
#   bash benchmarks/h200.sh mathprobe  # the native float32 math per element on one thread and
#                                   # all cores beside numpy, and which loops gcc vectorized here
#                                   # (extra/cpu_math_probe.py)
#   bash benchmarks/h200.sh pool    # a cpu_threads op timed with its threads hot, yielding and
#                                   # asleep, beside the quick profile's price (extra/pool_states.py)
#   bash benchmarks/h200.sh largecpu  # cpu_threads around the sweep's cold-timing limit, timed
#                                   # five ways (extra/large_cpu.py; why large CPU costs read high)
#   bash benchmarks/h200.sh vstorch  # the native CPU kernels' tests, a quick profile of this
#                                   # machine, then benchmarks/vs_torch.py (softcuda against
#                                   # PyTorch, CPU and CUDA) and benchmarks/cpu_threads.py with it
#   bash benchmarks/h200.sh fusion  # the fused kernels' CUDA tests, a quick profile of this
#                                   # machine, benchmarks/fusion.py (the 8-op chain fused, unfused
#                                   # and as one cupy.fuse kernel) and vs_torch.py's chain8
#   bash benchmarks/h200.sh rows    # softmax and layer norm rows of 4,096 and attention (heads of
#                                   # 64 and 128) against PyTorch, under the quick profile, end
#                                   # to end and (softmax, attention) in kernel time
#   bash benchmarks/h200.sh softmaxvar  # softmax.cu's tuning variants beside the production
#                                   # kernel in kernel time (extra/softmax_variants.py)
#   bash benchmarks/h200.sh train   # one Adam step of four MLPs against PyTorch eager, every
#                                   # placement predicted and measured (train_vs_torch.py)
#   bash benchmarks/h200.sh mlp [PROFILE]  # `softcuda run examples/mlp.py --repeat 20`: the
#                                   # plan per node, predicted beside measured (run-mlp.txt)
#
# Everything worth keeping is written under $OUT (at most 8 files come back from the device
# tool), and the last lines printed are the short summary.
#
# The reference sweep measures every op with a budget of 900 s (over all its processes), and the
# device tool allows 10 minutes a command: `sweep` stops it with Ctrl-C (SIGINT, every row kept)
# after SWEEP_TIMEOUT seconds, and a second `sweep` call resumes it (`init --resume`, same flags)
# from the unfinished sweep under $RESULTS; verify runs once the profile is written.  The GPU machine is a fresh one
# each session, and /tmp (with $RESULTS) lasts only while it stays warm between calls, about
# 30 s: make the second call at once, or carry the first call's rows back in .resume/ (see
# restore_carried below), or it starts the sweep over.
set -uo pipefail
MODE=${1:-check}
OUT=${OUT:-/tmp/softcuda-out}
RESULTS=${RESULTS:-/tmp/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPY_TF32=0
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
# Wheels the GPU machine lacks (numexpr, a competitor in benchmarks/cpu_threads.py), carried in
# .whl/ by the device tool when present.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
rm -f "$OUT/install.log"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"
lscpu | grep -E "^(Model name|Socket|NUMA)" || true

# A sweep's raw CSV (gzipped) and metadata, from $RESULTS, into $OUT.
bring_back() {
  for f in "$RESULTS"/*/"$1"*; do
    case "$f" in
      *.csv) gzip -c "$f" >"$OUT/$(basename "$f").gz" ;;
      *) cp "$f" "$OUT/" ;;
    esac
  done
}

# This machine's quick profile, made once while the machine stays warm (/tmp outlives a call
# only then) and brought back with each call that uses it: $QUICK names it.
QUICK=${QUICK:-/tmp/softcuda-CONFIG-quick.soft}  # QUICK=results/nvidia-h100/CONFIG-quick.soft: the committed one
quick_profile() {
  if [ ! -f "$QUICK" ]; then
    softcuda init --spec sweeps/quick.yaml --out "$QUICK" --results "$RESULTS" 2>&1 \
      | tee "$OUT/init-quick.txt" | tail -3
    # its raw rows too: a profile that prices plans far off is judged from them (one quick
    # sweep on the H100 read cpu_threads 3-6x slow at 2^20-2^22, and nothing was left to see why)
    bring_back "sweep-quick-"
  fi
  cp "$QUICK" "$OUT/CONFIG-quick.soft"
}

# A sweep whose machine was given back between two calls (the device tool keeps one only about
# 30 s idle): copy the raw CSV and metadata the last call brought back into .resume/ here, name
# .resume in the call's carry, and `sweep` restores them under $RESULTS, so that `init --resume`
# goes on from those rows on the fresh machine instead of starting over.
restore_carried() {
  grep -qs '"complete": false' "$RESULTS"/*/sweep-default-*.meta.json && return 0
  local meta folder name
  # the newest sweep carried, and only if it is unfinished: an older unfinished one is not
  # resumed over a newer finished one
  meta=$(ls .resume/sweep-default-*.meta.json 2>/dev/null | sort | tail -1)
  [ -n "$meta" ] && grep -qs '"complete": false' "$meta" || return 0
  name=$(basename "${meta%.meta.json}")
  # already here (finished: the carried copy is stale; it must not replace it)
  ls "$RESULTS"/*/"$name".meta.json >/dev/null 2>&1 && return 0
  if [ ! -f "${meta%.meta.json}.csv.gz" ]; then
    echo "error: .resume/$name.meta.json is carried without its .csv.gz; carry both, or neither"
    return 1
  fi
  # the device's folder, as the sweep names it: softcuda.device.slug of the metadata's "device"
  folder=$(python3 -c 'import json, sys
from softcuda.device import slug
print(slug(json.load(open(sys.argv[1]))["device"]))' "$meta") || return 1
  mkdir -p "$RESULTS/$folder"
  gunzip -c "${meta%.meta.json}.csv.gz" >"$RESULTS/$folder/$name.csv" || return 1
  cp "$meta" "$RESULTS/$folder/"
  echo "restored the unfinished sweep $name from .resume/ into $RESULTS/$folder"
}

# One `softcuda init` of the reference spec for at most $1 seconds, resuming an unfinished one
# (restored from .resume/ where the machine is fresh), its rows brought back into $OUT, and
# verify where it finished.  Returns 0 (finished), 10 (stopped by the time limit, rows kept:
# resume it) or init's failing status.
sweep_once() {
  restore_carried || return 1
  local log=init-default.txt resume=() status
  if grep -qs '"complete": false' "$RESULTS"/*/sweep-default-*.meta.json; then
    log=init-default-resumed.txt resume=(--resume)
  fi
  rm -f "$OUT/CONFIG.soft"  # there afterwards only if this init wrote it
  timeout -s INT -k 60 "$1" softcuda init --spec sweeps/default.yaml "${resume[@]}" \
    --out "$OUT/CONFIG.soft" --results "$RESULTS" 2>&1 | tee "$OUT/$log" | tail -60
  status=${PIPESTATUS[0]}
  bring_back "sweep-default-"
  if [ -f "$OUT/CONFIG.soft" ]; then
    softcuda verify --config "$OUT/CONFIG.soft" 2>&1 | tee "$OUT/verify-default.txt" | tail -5
    return 0
  elif [ "$status" = 124 ] || [ "$status" = 130 ]; then  # stopped by the timeout, rows kept
    return 10
  fi
  echo "the sweep failed (init exited $status, above); an unfinished sweep that cannot be"
  echo "resumed here (another spec or device) stays in $RESULTS and .resume/: remove it to start anew"
  [ "$status" = 0 ] && return 1  # init said it finished but wrote no profile
  return "$status"
}

# The finished reference sweeps on this machine or carried back in .resume/, one line each:
# "NAME.meta.json<TAB>CSV" (the one under $RESULTS where both have it), oldest first; only
# those started at or after PAIR_SINCE (a UTC time as the sweeps name it, 20261204T000000Z),
# where it is set, so that a stale .resume/ cannot make a pair of old sweeps.
finished_sweeps() {
  local since="sweep-default-${PAIR_SINCE:-0}"
  for meta in "$RESULTS"/*/sweep-default-*.meta.json .resume/sweep-default-*.meta.json; do
    grep -qs '"complete": true' "$meta" || continue
    [[ "$(basename "$meta")" < "$since" ]] && continue
    csv=${meta%.meta.json}.csv; [ -f "$csv" ] || csv=$csv.gz
    [ -f "$csv" ] && printf '%s\t%s\n' "$(basename "$meta")" "$csv"
  done | sort -s -u -k1,1
}

# The two latest finished reference sweeps compared (a finished sweep lost with its machine
# counts where its rows were carried back in .resume/; the one under $RESULTS wins).
compare_last_two() {
  local done_sweeps
  mapfile -t done_sweeps < <(finished_sweeps | tail -2 | cut -f2)
  if [ "${#done_sweeps[@]}" -lt 2 ]; then
    echo "compare needs two finished reference sweeps under $RESULTS or in .resume/; found ${#done_sweeps[@]}"
    return 2
  fi
  softcuda compare-sweeps "${done_sweeps[0]}" "${done_sweeps[1]}" 2>&1 \
    | tee "$OUT/stability-back-to-back.txt" | tail -30
}

case "$MODE" in
  check)
    python3 -m pytest -q -m cuda -p no:cacheprovider tests/ 2>&1 | tee "$OUT/cuda-tests.txt" | tail -25
    python3 benchmarks/gpu.py 2>&1 | tee "$OUT/gpu-bench.txt"
    python3 benchmarks/cpu_threads.py 2>&1 | tee "$OUT/cpu-threads.txt"
    ;;
  tests)
    # the CUDA tests alone (all, or the files named), when a session's time is short
    python3 -m pytest -q -m cuda -p no:cacheprovider "${@:2}" 2>&1 | tee "$OUT/cuda-tests.txt" | tail -25
    status=${PIPESTATUS[0]}
    ls -la "$OUT"
    exit "$status"
    ;;
  newcomer)
    # What a newcomer's first commands see: the examples and verify from the repository root
    # (the committed CONFIG.soft is used only if it is this machine's), cold compile times, and
    # the quick sweep with an empty CuPy kernel cache, so every kernel it launches is compiled
    # inside its wall time.
    for example in examples/*.py; do python3 "$example" 2>&1 | tail -3; done
    softcuda verify 2>&1 | head -3
    python3 benchmarks/compile_time.py 2>&1 | tee "$OUT/compile-time.txt"
    CUPY_CACHE_DIR=$(mktemp -d) softcuda init --spec sweeps/quick.yaml --out "$OUT/CONFIG-quick.soft" \
      --results "$RESULTS" 2>&1 | tee "$OUT/init-quick.txt" | tail -30
    softcuda verify --config "$OUT/CONFIG-quick.soft" 2>&1 | tee "$OUT/verify-quick.txt" | tail -5
    ;;
  vstorch)
    # The native CPU kernels are compiled here once (their cache under $HOME), then tested on
    # this machine's cores; the profile the benchmarks use is this machine's quick sweep.
    python3 -m pytest -q -p no:cacheprovider tests/test_native.py tests/test_cpu_threads.py \
      tests/test_op_definitions.py tests/test_scalar_operands.py 2>&1 | tee "$OUT/tests.txt" | tail -8
    quick_profile
    python3 benchmarks/vs_torch.py --config "$QUICK" --raw "$OUT/vs-torch.json" \
      2>&1 | tee "$OUT/vs-torch.txt"
    gzip -f "$OUT/vs-torch.json"
    python3 benchmarks/cpu_threads.py --config "$QUICK" 2>&1 \
      | tee "$OUT/cpu-threads.txt" | tail -3
    ;;
  fusion)
    python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_fusion.py tests/test_losses.py tests/test_cuda_kernels.py \
      tests/test_cuda_graph.py 2>&1 | tee "$OUT/cuda-tests-fusion.txt" | tail -6
    python3 -m pytest -q -p no:cacheprovider tests/test_native.py -k ten_million 2>&1 | tail -2
    quick_profile
    python3 benchmarks/fusion.py --config "$QUICK" 2>&1 | tee "$OUT/fusion.txt"
    python3 benchmarks/vs_torch.py --ops chain8 --min 12 --max 24 --config "$QUICK" \
      2>&1 | tee "$OUT/vs-torch-chain8.txt" | tail -20
    ;;
  quick)
    # this machine's quick profile (made once while the machine stays warm) and its numerical
    # check, every (op, backend) its rules use, the fused chains (ops.CHAINS) on the GPU included
    quick_profile
    softcuda verify --config "$QUICK" 2>&1 | tee "$OUT/verify-quick.txt" | tail -3
    ;;
  mathprobe)
    python3 extra/cpu_math_probe.py 2>&1 | tee "$OUT/cpu-math-probe.txt"
    ;;
  rows)
    # Row ops against PyTorch: softmax and layer norm along rows of 4,096 and attention heads of
    # 64 and 128 (the row-ops issue's shapes: 4096 x 4096 is 2^24, s = 1024 at d = 64 is 2^16),
    # and on the CPU rows of 1,000 from 32 x 1000 (2^15) on
    quick_profile
    python3 benchmarks/vs_torch.py --ops softmax,layernorm --row 1000 --min 15 --max 21 \
      --device cpu --config "$QUICK" 2>&1 | tee "$OUT/vs-torch-rows-1000.txt" | tail -20
    python3 benchmarks/vs_torch.py --ops softmax,layernorm --row 4096 --min 16 --max 24 \
      --config "$QUICK" 2>&1 | tee "$OUT/vs-torch-rows.txt" | tail -30
    python3 benchmarks/vs_torch.py --ops attention --min 16 --max 20 --config "$QUICK" 2>&1 \
      | tee "$OUT/vs-torch-attention.txt" | tail -12
    python3 benchmarks/vs_torch.py --ops attention --head 128 --min 17 --max 19 --config "$QUICK" \
      2>&1 | tee "$OUT/vs-torch-attention-128.txt" | tail -10
    # the same on the GPU in kernel time (data resident, CUDA events; plan.profile for softcuda)
    python3 benchmarks/vs_torch.py --device kernel --ops softmax,attention --row 4096 --min 16 \
      --max 24 --config "$QUICK" 2>&1 | tee "$OUT/vs-torch-kernel.txt" | tail -16
    ;;
  softmaxvar)
    # softmax.cu's tuning variants (SC_TUNING build) beside the production kernel on rows of
    # 1,024 to 8,192, in kernel time, after the softmax tests that check them
    python3 -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_kernels.py -k softmax 2>&1 \
      | tee "$OUT/cuda-tests-softmax.txt" | tail -3
    python3 extra/softmax_variants.py 2>&1 | tee "$OUT/softmax-variants.txt"
    ;;
  train)
    # One Adam step of four MLPs against PyTorch eager (CPU and CUDA), each in its own process,
    # every softcuda placement with its predicted time, under this machine's quick profile
    quick_profile
    python3 benchmarks/train_vs_torch.py --config "$QUICK" --profile --raw "$OUT/train-vs-torch.json" 2>&1 \
      | tee "$OUT/train-vs-torch.txt" | tail -50
    gzip -f "$OUT/train-vs-torch.json"
    ;;
  kernels)
    # Its own mode: it compiles matmul.cu's tuning build too and times every variant, which
    # would push `check` past the device tool's 10 minutes.
    python3 benchmarks/kernels_gpu.py 2>&1 | tee "$OUT/kernels-gpu.txt" | tail -60
    ;;
  sweep)
    # Ctrl-C (SIGINT) keeps every raw row: stop short of the device tool's 10-minute limit so
    # that an overlong sweep still brings its rows back (SWEEP_TIMEOUT, when other work comes
    # first in the same call), and resume an unfinished one (see the header).
    sweep_once "${SWEEP_TIMEOUT:-560}"
    status=$?
    if [ "$status" = 10 ]; then
      echo "the sweep is not finished: run \`bash benchmarks/h200.sh sweep\` again at once to resume it"
    elif [ "$status" != 0 ]; then
      exit "$status"
    fi
    ;;
  pair)
    # Two reference sweeps back to back, compared: sweep (resuming an unfinished one) until
    # two have finished on this machine or in .resume/, starting the second in the same call
    # as the first finishes, for at most PAIR_TIMEOUT seconds a call; then `compare`.  Carry
    # everything each call brings back in .resume/ for the next (the machine may be given
    # back between calls); a fresh .resume/ and machine start a fresh pair.  Set PAIR_SINCE
    # to the session's start (UTC, 20261204T000000Z) so that nothing older counts.
    # The second sweep's init replaces the first's CONFIG.soft in $OUT (a call brings back at
    # most 8 files): `softcuda init --from` its CSV writes that profile again, measuring nothing.
    deadline=$((SECONDS + ${PAIR_TIMEOUT:-560}))
    while [ "$(finished_sweeps | wc -l)" -lt 2 ]; do
      left=$((deadline - SECONDS))
      if [ "$left" -lt 60 ]; then
        echo "pair: $left s left in this call; run \`bash benchmarks/h200.sh pair\` again at once"
        break
      fi
      sweep_once "$left"
      status=$?
      if [ "$status" = 10 ]; then
        echo "pair: the sweep is not finished; run \`bash benchmarks/h200.sh pair\` again at once"
        break
      fi
      [ "$status" = 0 ] || exit "$status"
    done
    if [ "$(finished_sweeps | wc -l)" -ge 2 ]; then
      compare_last_two || exit $?
    fi
    ;;
  stable)
    # `stable N` runs the check N times (default 1), one after another; check k writes
    # stability.txt (k = 1) or stability-k.txt and its two CSVs.  Two checks take about 8 minutes.
    for k in $(seq 1 "${2:-1}"); do
      name=stability.txt; [ "$k" -gt 1 ] && name=stability-$k.txt
      rm -rf /tmp/stability && mkdir -p /tmp/stability
      python3 benchmarks/stability.py sweeps/stability.yaml --results /tmp/stability 2>&1 \
        | tee "$OUT/$name"
      for f in /tmp/stability/*/sweep-stability-*.csv; do gzip -c "$f" >"$OUT/$(basename "$f").gz"; done
    done
    ;;
  dense)
    # matmul at every 1-2 n between 96 and 200 (sweeps/matmul-dense.yaml), under SIGINT after
    # DENSE_TIMEOUT seconds so that its rows come back even if it overruns.
    timeout -s INT "${DENSE_TIMEOUT:-240}" softcuda init --spec sweeps/matmul-dense.yaml \
      --out "$OUT/CONFIG-dense.soft" --results "$RESULTS" 2>&1 | tee "$OUT/init-dense.txt" | tail -30
    bring_back "sweep-matmul-dense-"
    ;;
  placement)
    profile=${2:-CONFIG.soft}
    # PLACEMENT_ROUNDS: fewer rounds for a short call (3 took 68 s on the H100; 16 by default)
    python3 benchmarks/placement.py --config "$profile" --rounds "${PLACEMENT_ROUNDS:-16}" \
      --csv "$OUT/placement.csv" 2>&1 \
      | tee "$OUT/placement.txt" | tail -60
    softcuda plot --config "$profile" --chains "$OUT/placement.csv" --out "$OUT" 2>&1 \
      | tee "$OUT/chain-crossover.txt" | tail -40
    ;;
  training)
    python3 benchmarks/training.py --config "${2:-CONFIG.soft}" --csv "$OUT/training.csv" \
      --nodes "$OUT/training-nodes.csv" 2>&1 | tee "$OUT/training.txt" | tail -40
    for f in "$OUT/training.csv" "$OUT/training-nodes.csv"; do [ -f "$f" ] && gzip -f "$f"; done
    # the digits example's step as `softcuda run` shows it: placement, predicted and measured
    softcuda run examples/digits.py --config "${2:-CONFIG.soft}" --repeat 20 >"$OUT/run-digits.txt" 2>&1
    tail -12 "$OUT/run-digits.txt"
    ;;
  switch)
    python3 extra/switch_cost.py 2>&1 | tee "$OUT/switch-cost.txt"
    ;;
  verify)
    # What reads this machine's quick profile, in one call of at most about 560 s,
    # each part capped so that the call ends in time, all of it tarred into $OUT/verify.tgz
    # (the device tool brings back at most 8 files): the GPU tests of graphs, optimizers,
    # fusion and row ops; the pool's states; vs_torch (CPU and CUDA); the placement benchmark
    # (3 rounds: 68 s on the H100, where 4 ran past a 70 s cap); the host clock's cost beside
    # a single timed call and blocks of calls (extra/timer_offset.py); the training steps; fused CPU
    # chains priced against their time (extra/cpu_group_pricing.py); where the committed
    # CONFIG.soft is this machine's, the training steps and step_trace.py under it.  On the
    # H100 the quick sweep alone took 103 to 166 s.
    # VERIFY_LIMIT_S: the call's own limit (the device tool's timeout); each part's cap is cut
    # to the time left before it, less 45 s (its kill grace and the tarball, made again after
    # each part), so that a call stopped at its limit still brings back what finished.
    work=$(mktemp -d)
    limit_s=${VERIFY_LIMIT_S:-590}
    pack() {  # written beside, then moved: a call stopped mid-tar keeps the last whole one
      (shopt -s nullglob; cd "$work" || exit 1
       raw=(*.json *.csv); [ ${#raw[@]} -gt 0 ] && gzip -kf -- "${raw[@]}"
       files=(*.txt *.gz *.soft *.meta.json); tar czf "$OUT/verify.tgz.part" -- "${files[@]}") \
        && mv -f "$OUT/verify.tgz.part" "$OUT/verify.tgz"
    }
    part() {  # part NAME SECONDS COMMAND...: its output in $work/NAME.txt, its status noted
      local name=$1 cap=$2; shift 2
      if [[ " ${VERIFY_SKIP:-} " == *" $name "* ]]; then echo "== $name: skipped"; return; fi
      local left=$((limit_s - SECONDS - 45))  # a stopped part's 20 s grace, then the tarball
      [ "$left" -lt "$cap" ] && cap=$left
      if [ "$cap" -lt 10 ]; then echo "== $name: no time left"; return; fi
      echo "== $name (at most $cap s)"
      timeout -k 20 -s INT "$cap" "$@" >"$work/$name.txt" 2>&1
      echo "   status $? after $SECONDS s in all"
      tail -4 "$work/$name.txt"
      pack
    }
    quick_profile
    cp "$QUICK" "$OUT/init-quick.txt" "$work/" 2>/dev/null
    mv "$OUT"/sweep-quick-* "$work/" 2>/dev/null  # into the tarball (8 files come back at most)
    pack
    part cuda-tests 110 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda_graph.py \
      tests/test_optim.py tests/test_losses.py tests/test_fusion.py
    part timer-offset 40 python3 extra/timer_offset.py --max 18
    part pool-states 25 python3 extra/pool_states.py --config "$QUICK"
    part cpu-math-probe 30 python3 extra/cpu_math_probe.py
    part placement-quick 90 python3 benchmarks/placement.py --config "$QUICK" --rounds 3 \
      --csv "$work/placement-quick.csv"
    part train-vs-torch 60 python3 benchmarks/train_vs_torch.py --config "$QUICK" \
      --raw "$work/train-vs-torch.json"
    part cpu-group-pricing 60 python3 extra/cpu_group_pricing.py --config "$QUICK" --reps 9
    # the committed reference profile, where it is this machine's: its training steps (each
    # step timed alone beside its price) and the mixed plans' host time step by step
    if python3 -c 'import sys; from softcuda.config import load_config
sys.exit(0 if load_config("CONFIG.soft").fits_here()[0] else 1)' 2>/dev/null; then
      part train-reference 60 python3 benchmarks/train_vs_torch.py --config CONFIG.soft \
        --profile --raw "$work/train-reference.json"
      part step-trace-reference 40 python3 extra/step_trace.py --config CONFIG.soft --runs 100
    else
      echo "== train-reference, step-trace-reference: CONFIG.soft is another machine's"
    fi
    part vs-torch "${VERIFY_VSTORCH_S:-240}" python3 benchmarks/vs_torch.py --config "$QUICK" \
      --raw "$work/vs-torch.json" --ops add,mul,tanh,exp,sigmoid,sum,mean,max,softmax,chain
    pack
    rm -f "$OUT/CONFIG-quick.soft" "$OUT/init-quick.txt"  # both are in the tarball
    ;;
  pool)
    quick_profile
    python3 extra/pool_states.py --config "$QUICK" 2>&1 | tee "$OUT/pool-states.txt"
    ;;
  trace)
    quick_profile
    python3 extra/step_trace.py --config "$QUICK" 2>&1 | tee "$OUT/step-trace.txt"
    ;;
  mlp)
    softcuda run examples/mlp.py --config "${2:-CONFIG.soft}" --repeat 20 >"$OUT/run-mlp.txt" 2>&1
    tail -12 "$OUT/run-mlp.txt"
    ;;
  largecpu)
    python3 extra/large_cpu.py "${@:2}" 2>&1 | tee "$OUT/large-cpu.txt"
    ;;
  launch)
    python3 -m softcuda.sweep.launch "${2:-CONFIG.soft}" 2>&1 | tee "$OUT/launch.txt"
    cp "${2:-CONFIG.soft}" "$OUT/"
    ;;
  switchcal)
    python3 -m softcuda.sweep.switch "${2:-CONFIG.soft}" 2>&1 | tee "$OUT/switch.txt"
    cp "${2:-CONFIG.soft}" "$OUT/"
    ;;
  compare)
    # The last two finished reference sweeps, compared (the restated stability check of two
    # back-to-back references): `pair` runs them and calls this; so does `sweep` until it
    # finishes, `sweep` again until the second finishes, then `compare`.
    compare_last_two || exit $?
    ;;
  recheck)
    softcuda verify --config CONFIG.soft --recheck 2>&1 | tee "$OUT/verify-recheck.txt" | tail -25
    ;;
  *)
    echo "unknown mode $MODE (check | tests | newcomer | vstorch | fusion | rows | softmaxvar | train | kernels | sweep | pair | stable | recheck | compare | dense | placement | training | switch | trace | pool | quick | mathprobe | verify | largecpu | mlp | launch | switchcal)"
    exit 2 ;;
esac
ls -la "$OUT"
