#!/usr/bin/env bash
# bad_input_catalogue.sh RANKS BUILD_DIR WORK_DIR: the catalogue of bad input. Every case runs a
# program the way a user would (the MPI programs through scripts/mpirun/local.sh on RANKS ranks,
# ckpt_tool as one process) and asserts three things: the exit code, that exactly one message is
# printed (one line on stderr matching the case's pattern, with at most an indented continuation
# such as the caret under a parse error; CLI11's "Run with --help" hint aside), and that the
# program ended within 10 s (a hang is a failure, not a wait). Refusals of the command line itself
# (`flag`) and one-process programs (`once`) run at 2 ranks only (below).
# Ends with "catalogue: N passed, M failed" and exits 1 when any case failed. CATALOGUE_ONLY=REGEX
# runs only the cases whose names match.
set -uo pipefail
ranks=$1
build=$(cd "$2" && pwd)
work=$3
here=$(cd "$(dirname "$0")" && pwd)
launch="$here/../../scripts/mpirun/local.sh"
rm -rf "$work" && mkdir -p "$work"
apps="$build/apps"
passed=0
failed=0
limit=10

# Cases run CATALOGUE_JOBS at a time (default: 4 at 1-2 ranks, 2 at 8): a case mostly waits on
# mpirun's start, so this cuts the wall time without pushing any case near its limit.
jobs=${CATALOGUE_JOBS:-$((ranks > 2 ? 2 : 4))}
mkdir -p "$work/cases"
count=0

# The clock in microseconds, from bash's EPOCHREALTIME (seconds and six decimals): no `date`
# process. Here, as below, a shell builtin stands in for a program where it can: on a virtual
# machine each fork and exec costs about 10 ms of CPU (docs/design-log.md, "Thirty-seventh
# session"), and the catalogue runs hundreds of cases.
now_us() { local t=$EPOCHREALTIME; printf -v "$1" '%s' "${t//[!0-9]/}"; }

# run_case DIR NAME RC PATTERN CMD...: runs one case, writes its report to DIR/report and
# "pass" or "fail" to DIR/verdict.
run_case() {
  local dir=$1 name=$2 want_rc=$3 pattern=$4
  shift 4
  local start end rc
  now_us start
  timeout $((limit + 5)) "$@" >"$dir/out" 2>"$dir/err" </dev/null
  rc=$?
  now_us end
  local ms=$(((10#$end - 10#$start) / 1000))
  # One message: its first line matches the pattern (once in all of stderr); any further lines
  # are its indented continuation (the caret under a parse error), never a second message, a
  # second rank's copy or a crash report.
  local problem="" first others=0 matches line
  local -a lines
  # Also aside: libevent's "[warn] Epoll ... failed ...: Bad file descriptor", which Open MPI's
  # launcher sometimes prints when a job's ranks exit on an error, a race in its event loop's
  # teardown that Open MPI has left as it is (open-mpi/ompi issues 2004 and 5520); it appeared
  # in 2 of the 80 cases at 8 ranks in one of three runs of the test command on 2026-11-25.
  grep -v -e '^[[:space:]]*$' -e '^Run with --help for more information\.$' \
    -e '^\[warn\] Epoll [A-Z]*([0-9]*) on fd [0-9]* failed\..*: Bad file descriptor$' "$dir/err" >"$dir/message"
  mapfile -t lines <"$dir/message"
  first=${lines[0]-}
  for line in "${lines[@]:1}"; do [[ "$line" == "  "* ]] || others=$((others + 1)); done
  matches=$(grep -cE -- "$pattern" "$dir/err")
  if [ "$ms" -gt $((limit * 1000)) ]; then
    problem="took ${ms} ms (limit ${limit} s)"
  elif [ "$rc" -ne "$want_rc" ]; then
    problem="exit code $rc, expected $want_rc"
  elif [ -z "$first" ] || [ "$others" -ne 0 ]; then
    problem="expected exactly one message on stderr"
  elif [ "$matches" -ne 1 ] || ! grep -qE -- "$pattern" <<<"$first"; then
    problem="the message does not match '$pattern' (once)"
  fi
  {
    if [ -z "$problem" ]; then
      printf 'ok    %-40s exit %d, %5d ms: %s\n' "$name" "$rc" "$ms" "$first"
    else
      printf 'FAIL  %-40s %s\n' "$name" "$problem"
      printf '      command: %s\n' "$*"
      sed 's/^/      stderr: /' "$dir/err" | head -20
      sed 's/^/      stdout: /' "$dir/out" | tail -5
    fi
  } >"$dir/report"
  if [ -z "$problem" ]; then echo pass >"$dir/verdict"; else echo fail >"$dir/verdict"; fi
}

# expect NAME RC PATTERN (mpi|one) PROGRAM ARGS...: starts a case in the background.
expect() {
  local name=$1 want_rc=$2 pattern=$3 how=$4
  shift 4
  if [ -n "${CATALOGUE_ONLY:-}" ] && ! [[ "$name" =~ $CATALOGUE_ONLY ]]; then return; fi
  local cmd=("$@")
  [ "$how" = mpi ] && cmd=(bash "$launch" "$ranks" "$@")
  count=$((count + 1))
  local dir
  local -a running
  printf -v dir '%s/cases/%03d' "$work" "$count"
  mkdir -p "$dir"
  # The running cases counted without a pipe (jobs is a builtin; its list goes through a file).
  while jobs -rp >"$work/running" && mapfile -t running <"$work/running" && [ "${#running[@]}" -ge "$jobs" ]; do
    wait -n
  done
  run_case "$dir" "$name" "$want_rc" "$pattern" "${cmd[@]}" &
}

# finish: waits for every case and prints the reports in order.
finish() {
  wait
  for dir in "$work"/cases/*/; do
    [ -f "$dir/report" ] || continue
    local -a report
    local verdict
    mapfile -t report <"$dir/report"
    printf '%s\n' "${report[@]}"
    read -r verdict <"$dir/verdict"
    if [ "$verdict" = pass ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
}

# once NAME RC PATTERN one PROGRAM ARGS...: a case whose program runs as one process, with no MPI
# job of this rank count (a script's or ckpt_tool's refusal): it runs at 2 ranks only, the count at
# which every build runs the catalogue, not three times alike.
once() {
  [ "$ranks" -eq 2 ] || return 0
  expect "$@"
}

# flag NAME RC PATTERN mpi PROGRAM ARGS...: a refusal of the command line itself (a flag's value or
# a combination of flags, a mesh, spec, rule or shape text that does not parse or names an axis
# the mesh lacks), which every rank reaches alone from its own arguments, with the same message at
# any rank count. It runs at 2 ranks only, the count at which every build runs the catalogue:
# there the ranks still agree before the one message. How such a refusal ends a job of 1 and of
# 8 ranks is shown by the cases of each program left to `expect` (an unknown flag, a bad value
# after parsing, a spec that does not parse), which run at every count, as do the cases whose
# outcome depends on the ranks (the mesh against the rank count, memory per rank, blocks per
# rank) or on what the ranks find (files, checkpoints, directories, the environment, a loss).
# An 8-rank case costs about 2 CPU-seconds, nearly all Open MPI's start. CATALOGUE_FLAGS=0 (the
# sanitizer build's run) leaves these cases out: each compares a parsed number or word, and the
# parsers of meshes, specs, rules and shape strings are fuzzed under the same sanitizers.
flag() {
  [ "$ranks" -eq 2 ] && [ "${CATALOGUE_FLAGS:-1}" != 0 ] || return 0
  expect "$@"
}

# A mesh of this rank count with both of train_mlp's axes.
mesh="data=1,model=$ranks"

# --- train_mlp: flags -------------------------------------------------------------------------
tm="$apps/train_mlp"
small=(--mesh "$mesh" --depth 16 --layers 1 --batch 8 --quiet)
expect train_mlp.unknown_flag 2 'not expected: --bogus' mpi "$tm" --bogus
expect train_mlp.batch_zero 2 'train_mlp: --batch, --depth and --layers must be >= 1' mpi "$tm" "${small[@]}" --batch 0
flag train_mlp.depth_negative 2 'train_mlp: --batch, --depth and --layers must be >= 1' mpi "$tm" "${small[@]}" --depth -5
flag train_mlp.layers_zero 2 'train_mlp: --batch, --depth and --layers must be >= 1' mpi "$tm" "${small[@]}" --layers 0
flag train_mlp.steps_negative 2 'train_mlp: --steps must be >= 0' mpi "$tm" "${small[@]}" --steps -1
flag train_mlp.microbatches_zero 2 'train_mlp: --microbatches must be >= 1' mpi "$tm" "${small[@]}" --microbatches 0
flag train_mlp.keep_zero 2 'train_mlp: --keep must be >= 1' mpi "$tm" "${small[@]}" --keep 0
flag train_mlp.save_every_negative 2 'train_mlp: --save-every must be >= 0' mpi "$tm" "${small[@]}" --save-every -1
flag train_mlp.loss_unknown 2 '--loss: foo not in \{sum,mse,xent\}' mpi "$tm" "${small[@]}" --loss foo
flag train_mlp.input_unknown 2 '--input: zeros not in \{ones,random\}' mpi "$tm" "${small[@]}" --input zeros
flag train_mlp.dtype_unknown 2 '--dtype: fp16 not in \{f32,bf16\}' mpi "$tm" "${small[@]}" --dtype fp16
flag train_mlp.lr_not_a_number 2 'Could not convert: --lr = abc' mpi "$tm" "${small[@]}" --lr abc
# An empty number is refused (CLI11 read it as 0: --steps '' trained no step, --temperature ''
# sampled greedily).
flag train_mlp.steps_empty 2 '^--steps: an empty value is not a number$' mpi "$tm" "${small[@]}" --steps ''
flag train_lm.temperature_empty 2 '^--temperature: an empty value is not a number$' mpi "$apps/train_lm" --temperature ''
flag train_mlp.examples_negative 2 '^train_mlp: --examples must be >= 0, got -1$' mpi "$tm" "${small[@]}" --examples -1
# Found in the forty-fifth session: the pool's index e * depth + c wrapped past 2^64.
flag train_mlp.examples_overflow 2 '^train_mlp: --examples 9223372036854775807 times --depth 16 elements overflow the pool.s index$' \
  mpi "$tm" "${small[@]}" --examples 9223372036854775807
# Found in the forty-fifth session: without --logical a mesh lacking 'model' was refused for a rule
# of the default --rules ("rule 2 'hidden=model': mesh axis 'model' is not in the mesh").
expect train_mlp.mesh_without_model 2 "^train_mlp: --mesh 'data=$ranks' has no axis 'model': the model's specs split over the axes data and model \\(--logical maps its logical axes to others through --rules\\)\$" \
  mpi "$tm" --mesh "data=$ranks" --depth 16 --layers 1 --quiet
expect train_mlp.microbatches_do_not_divide 2 "train_mlp: --microbatches 3 does not divide each rank's batch block of 8 rows" \
  mpi "$tm" "${small[@]}" --microbatches 3
flag train_mlp.resume_without_dir 2 'train_mlp: --resume, --save-every and --overwrite need --ckpt-dir' mpi "$tm" "${small[@]}" --resume
flag train_mlp.overwrite_without_dir 2 'train_mlp: --resume, --save-every and --overwrite need --ckpt-dir' mpi "$tm" "${small[@]}" --overwrite
expect train_lm.dtype_unknown 2 '^--dtype: fp16 not in \{f32,bf16\}$' mpi "$apps/train_lm" --dtype fp16
# train_lm's own range checks, each with its message (none had a case).
lm=(mpi "$apps/train_lm" --mesh "data=1,seq=1,model=$ranks")
flag train_lm.steps_negative 2 '^train_lm: --steps must be >= 0$' "${lm[@]}" --steps -1
flag train_lm.layers_too_many 2 '^train_lm: --layers must be <= 10000, got 10001$' "${lm[@]}" --layers 10001
flag train_lm.keep_zero 2 '^train_lm: --keep must be >= 1$' "${lm[@]}" --keep 0
flag train_lm.save_every_negative 2 '^train_lm: --save-every must be >= 0$' "${lm[@]}" --save-every -1
flag train_lm.eval_every_negative 2 '^train_lm: --eval-every must be >= 0$' "${lm[@]}" --eval-every -1
flag train_lm.sample_bytes_negative 2 '^train_lm: --sample-bytes must be between 0 and 100000, got -1$' "${lm[@]}" --sample-bytes -1
flag train_lm.sample_bytes_too_many 2 '^train_lm: --sample-bytes must be between 0 and 100000, got 100001$' "${lm[@]}" --sample-bytes 100001
flag train_lm.prompt_empty 2 '^train_lm: --prompt must not be empty$' "${lm[@]}" --prompt ''
flag train_lm.save_every_without_dir 2 '^train_lm: --resume, --save-every and --overwrite need --ckpt-dir$' "${lm[@]}" --save-every 5
flag train_lm.resume_and_overwrite 2 '^train_lm: --resume and --overwrite exclude each other$' "${lm[@]}" --resume --overwrite --ckpt-dir "$work/unused"
flag bench_collectives.iters_just_over 2 '^bench_collectives: --iters must be between 1 and 1000000, got 1000001$' mpi "$apps/bench_collectives" --iters 1000001
flag bench_checkpoint.large_depth_just_over 2 '^bench_checkpoint: --large-depth must be between 1 and 65536, got 65537$' mpi "$apps/bench_checkpoint" --large-depth 65537
flag train_lm.opt_state_unknown 2 '^--opt-state: zero1 not in \{replicated,sharded\}$' mpi "$apps/train_lm" --opt-state zero1
# A run that diverges stops at its first loss that is not finite, on every rank, before saving that
# step: the checkpoint of step 1 stays the directory's only and latest one (the check after the
# run fails the case otherwise).
expect train_lm.loss_not_finite 2 \
  '^train_lm: the loss is nan at step 2: training diverged \(a smaller --lr may help\); stopped before saving this step$' \
  one bash -c 'bash "$1" "$2" "$3" "${@:5}"; rc=$?
    [ "$(ls "$4")" = "$(printf "ckpt_00000001.h5\nlatest")" ] || { echo "directory holds: $(ls "$4" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$apps/train_lm" "$work/diverged" --mesh "data=1,seq=1,model=$ranks" --steps 5 \
  --lr 1e30 --eval-every 0 --d-model 32 --heads 8 --d-ff 64 --layers 1 --seq-len 16 --batch 2 --quiet --sample-bytes 0 \
  --ckpt-dir "$work/diverged" --save-every 1
# The last step's update reaches no training loss: the state it leaves is checked (and the
# transformer's evaluated) before it is saved. Until the forty-fifth session a run of one step saved
# weights of infinity, or whose held-out loss was nan, and exited 0; now nothing is saved.
expect train_mlp.state_not_finite 2 \
  '^train_mlp: the parameters or their Adam moments hold a nan or an infinity after step 1: training diverged \(a smaller --lr may help\); stopped before saving it$' \
  one bash -c 'bash "$1" "$2" "$3" "${@:5}"; rc=$?
    [ -z "$(ls "$4" 2>/dev/null)" ] || { echo "directory holds: $(ls "$4" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$tm" "$work/diverged_mlp" "${small[@]}" --steps 1 --lr 1e39 \
  --ckpt-dir "$work/diverged_mlp"
# On 4 KiB of text (204 bytes held out: 6 batches to evaluate); on --data's default, 15 KiB held
# out, the evaluation ran 473 batches, about 1 s at 8 ranks alone on this machine's two CPUs and
# past the 10 s limit beside another 8-rank test (2026-12-02).
head -c 4096 /usr/share/common-licenses/GPL-3 >"$work/diverged_text"
expect train_lm.heldout_not_finite 2 \
  '^train_lm: the held-out loss is nan after step 1: training diverged \(a smaller --lr may help\); stopped$' \
  one bash -c 'bash "$1" "$2" "$3" "${@:5}"; rc=$?
    [ -z "$(ls "$4" 2>/dev/null)" ] || { echo "directory holds: $(ls "$4" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$apps/train_lm" "$work/diverged_lm" --mesh "data=1,seq=1,model=$ranks" --steps 1 \
  --lr 1e30 --eval-every 0 --d-model 32 --heads 8 --d-ff 64 --layers 1 --seq-len 16 --batch 2 --quiet --sample-bytes 0 \
  --data "$work/diverged_text" --ckpt-dir "$work/diverged_lm"
flag train_mlp.resume_and_overwrite 2 '^train_mlp: --resume and --overwrite exclude each other$' \
  mpi "$tm" "${small[@]}" --resume --overwrite --ckpt-dir "$work/unused"
flag train_mlp.layers_too_many 2 '^train_mlp: --layers must be <= 10000, got 10001$' mpi "$tm" "${small[@]}" --layers 10001
expect train_mlp.memory_does_not_fit 2 '^train_mlp: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$tm" --mesh "$mesh" --depth 2147483648 --quiet
expect env.shm_collectives_unknown 2 "^train_mlp: TESSERA_SHM_COLLECTIVES must be unset, 0 or 1, got 'off'\$" \
  mpi env TESSERA_SHM_COLLECTIVES=off "$tm" "${small[@]}"
expect env.pack_unknown 2 "^train_mlp: TESSERA_PACK must be unset, datatype or memcpy, got 'fast'\$" \
  mpi env TESSERA_PACK=fast "$tm" "${small[@]}"
expect env.shard_map_check_unknown 2 "^train_mlp: TESSERA_SHARD_MAP_CHECK must be unset, 0 or 1, got 'yes'\$" \
  mpi env TESSERA_SHARD_MAP_CHECK=yes "$tm" "${small[@]}"
expect env.collective_check_unknown 2 "^train_mlp: TESSERA_COLLECTIVE_CHECK must be unset, 0 or 1, got 'on'\$" \
  mpi env TESSERA_COLLECTIVE_CHECK=on "$tm" "${small[@]}"
expect env.denormals_unknown 2 "^train_mlp: TESSERA_DENORMALS must be unset, flush or keep, got 'ftz'\$" \
  mpi env TESSERA_DENORMALS=ftz "$tm" "${small[@]}"
expect env.failed_rank_wait_unknown 2 \
  "^train_mlp: TESSERA_FAILED_RANK_WAIT must be unset, 1, 3, 10, 30 or 100, got '5'\$" \
  mpi env TESSERA_FAILED_RANK_WAIT=5 "$tm" "${small[@]}"
once env.local_bind_unknown 2 "^local.sh: TESSERA_LOCAL_BIND must be unset, auto or none, got 'core'\$" \
  one env TESSERA_LOCAL_BIND=core bash "$launch" "$ranks" "$tm" "${small[@]}"
if [ "$ranks" -ge 2 ]; then  # rank 0 alone keeps subnormals
  expect env.denormals_differ 2 \
    "^train_mlp: TESSERA_DENORMALS must be alike on every rank \\(flush on some ranks, keep on others\\)\$" \
    mpi bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export TESSERA_DENORMALS=keep; exec "$@"' _ "$tm" "${small[@]}"
fi
if [ "$ranks" -ge 2 ]; then  # rank 0 alone asks for the collectives' check
  expect env.collective_check_differs 2 \
    "^train_mlp: TESSERA_COLLECTIVE_CHECK must be alike on every rank \\(0 on some ranks, 1 on others\\)\$" \
    mpi bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export TESSERA_COLLECTIVE_CHECK=1; exec "$@"' _ "$tm" "${small[@]}"
fi
if [ "$ranks" -ge 2 ]; then  # rank 0 alone asks for shard_map's collective check
  expect env.shard_map_check_differs 2 \
    "^train_mlp: TESSERA_SHARD_MAP_CHECK must be alike on every rank \\(0 on some ranks, 1 on others\\)\$" \
    mpi bash -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && export TESSERA_SHARD_MAP_CHECK=1; exec "$@"' _ "$tm" "${small[@]}"
fi
flag train_mlp.save_every_without_dir 2 'train_mlp: --resume, --save-every and --overwrite need --ckpt-dir' mpi "$tm" "${small[@]}" --save-every 5

# --- train_mlp: meshes and rules ---------------------------------------------------------------
expect mesh.size_is_not_rank_count 2 "mesh \\(data: 3, model: 1\\) has 3 ranks but the communicator has $ranks" \
  mpi "$tm" --mesh data=3,model=1
expect mesh.size_zero 2 "mesh 'data=0,model=1': axis 'data' has size 0" mpi "$tm" --mesh data=0,model=1
flag mesh.axis_twice 2 "mesh 'data=1,data=1': axis name 'data' appears twice" mpi "$tm" --mesh data=1,data=1
flag mesh.size_not_a_number 2 "mesh 'data=two,model=1'" mpi "$tm" --mesh data=two,model=1
flag mesh.empty 2 "mesh ''" mpi "$tm" --mesh ''
# --rules alone was ignored in silence: the specs are the tutorial's own without --logical.
flag rules.without_logical 2 '^--rules requires --logical$' mpi "$tm" "${small[@]}" --rules batch=model
# An empty path (an unset shell variable) meant the flag's default in silence: no checkpoint saved,
# the default corpus trained on.
flag train_mlp.ckpt_dir_empty 2 '^--ckpt-dir: an empty value names no path$' mpi "$tm" "${small[@]}" --ckpt-dir ''
flag train_lm.data_empty 2 '^--data: an empty value names no path$' mpi "$apps/train_lm" --data ''
expect rules.unknown_axis 2 "mesh axis 'tensor' is not in the mesh" mpi "$tm" "${small[@]}" --logical --rules batch=data,hidden=tensor
flag rules.no_equals 2 "rules \"batch\": expected '=' after 'batch' \\(column 6\\)" mpi "$tm" "${small[@]}" --logical --rules batch
flag rules.axis_twice_in_a_rule 2 "mesh axis 'data' appears twice in the rule for 'batch' \\(column 12\\)" mpi "$tm" "${small[@]}" --logical --rules batch=data+data


# --- demo_mesh: specs, shapes and shape strings -----------------------------------------------
dm="$apps/demo_mesh"
dmesh=(--mesh "$mesh" --shape 16,64)
expect spec.unclosed 2 "spec 'P\\(data': expected ',', ';' or '\\)', found end of text at column 7" mpi "$dm" "${dmesh[@]}" --spec 'P(data'
flag spec.unknown_axis 2 "unknown mesh axis 'tensor'" mpi "$dm" "${dmesh[@]}" --spec 'P(tensor)'
flag spec.axis_twice 2 "mesh axis 'data' is used more than once" mpi "$dm" "${dmesh[@]}" --spec 'P(data, data)'
flag spec.axis_twice_with_partial 2 "mesh axis 'model' is used more than once" mpi "$dm" "${dmesh[@]}" --spec 'P(model; partial=model)'
flag spec.more_dimensions_than_tensor 2 "has 3 dimensions but the tensor has shape \\[16, 64\\]" \
  mpi "$dm" "${dmesh[@]}" --spec 'P(None, None, model)'
flag spec.bad_partial_clause 2 "spec 'P\\(data; partly=model\\)'" mpi "$dm" "${dmesh[@]}" --spec 'P(data; partly=model)'
flag spec.neither_jax_nor_shape_string 2 "shape string 'Q\\(data\\)': expected a space, '/' or the end, found '\\(' at column 2" mpi "$dm" "${dmesh[@]}" --spec 'Q(data)'
flag shape.negative 2 "demo_mesh: --shape \[-3, 4\] has a negative extent" mpi "$dm" --mesh "$mesh" --shape -3,4
flag shape.too_large 2 "demo_mesh: --shape \\[65536, 65536\\] has 4294967296 elements" mpi "$dm" --mesh "$mesh" --shape 65536,65536
# An empty extent was dropped (16,,64 ran as [16, 64]); an axis past the size limit was "not a
# positive integer".
flag shape.empty_extent 2 "^demo_mesh: --shape '16,,64': extent 1: an empty value is not a number\$" \
  mpi "$dm" --mesh "$mesh" --shape 16,,64
flag mesh.axis_too_large 2 "^demo_mesh: mesh 'data=2147483648': size of axis 'data' is 2147483648, past the 999999 ranks an axis may have\$" \
  mpi "$dm" --mesh data=2147483648
# Found in the forty-fifth session: only the 2^28 elements were checked, and every rank gathered
# the tensor (a replicated one once per rank): 16384 x 16384 replicated needs 6 GiB a rank, more
# than a rank's share of 24 GiB at 8 ranks (at fewer it fits, and runs for seconds): 4 bytes
# x (2^28 gathered + (2 x 1 + 3) blocks of 2^28, a replicated block the whole tensor) = 6 GiB exactly.
if [ "$ranks" -ge 8 ]; then
  expect demo_mesh.does_not_fit 2 '^demo_mesh: needs 6\.0 GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
    mpi "$dm" --mesh "$mesh" --shape 16384,16384 --spec 'P(None, None)'
fi
flag shape_string.empty_axis 2 "shape string 'rows/data cols/'" mpi "$dm" "${dmesh[@]}" --spec 'rows/data cols/'
flag shape_string.unknown_axis 2 "mesh axis 'tensor' of dimension rows is not in the mesh" mpi "$dm" "${dmesh[@]}" --spec 'rows/tensor cols'
expect shape_string.size_disagrees 2 "\\(\"16/data 32\", global shape \\[16, 64\\] on mesh data: 1, model: $ranks\\): dimension 1: expected 32, got 64" mpi "$dm" "${dmesh[@]}" --spec '16/data 32'
flag shape_string.bad_character 2 "shape string 'rows/da-ta cols'" mpi "$dm" "${dmesh[@]}" --spec 'rows/da-ta cols'

# --- the benchmarks ---------------------------------------------------------------------------
expect bench_collectives.min_zero 2 '^bench_collectives: --min must be >= 1, got 0$' mpi "$apps/bench_collectives" --min 0
flag bench_collectives.min_above_max 2 'bench_collectives: --max must be between --min \(4096\) and 4294967296, got 1024' \
  mpi "$apps/bench_collectives" --min 4096 --max 1024
flag bench_collectives.unknown_op 2 "bench_collectives: --ops: unknown collective 'gather_all' \(all_gather, reduce_scatter, all_to_all, all_reduce\)" mpi "$apps/bench_collectives" --ops gather_all
flag bench_train.copy_mib_zero 2 '^bench_train: --copy-mib must be between 1 and 65536, got 0$' mpi "$apps/bench_train" --copy-mib 0
expect bench_train.steps_zero 2 'bench_train: --steps must be >= 1' mpi "$apps/bench_train" --steps 0
flag bench_train.model_unknown 2 "^bench_train: --model must be mlp or lm, got 'gpt'$" mpi "$apps/bench_train" --model gpt
flag bench_collectives.iters_zero 2 '^bench_collectives: --iters must be between 1 and 1000000, got 0$' mpi "$apps/bench_collectives" --iters 0
flag bench_collectives.iters_huge 2 '^bench_collectives: --iters must be between 1 and 1000000, got 2000000000$' \
  mpi "$apps/bench_collectives" --iters 2000000000
flag bench_collectives.warmup_negative 2 '^bench_collectives: --warmup must be between 0 and 1000000, got -1$' mpi "$apps/bench_collectives" --warmup -1
flag bench_train.measure_seconds_zero 2 '^bench_train: --measure-seconds must be > 0 and <= 3600, got 0$' \
  mpi "$apps/bench_train" --measure-seconds 0
flag bench_train.strategy_unknown 2 "^bench_train: --strategy must be dp, tp, fsdp or 2d, got 'zero'$" \
  mpi "$apps/bench_train" --strategy zero
flag bench_train.strategy_and_mesh 2 '^bench_train: --strategy and --mesh exclude each other$' \
  mpi "$apps/bench_train" --strategy dp --mesh "$mesh"
flag bench_train.strategy_lm 2 '^bench_train: --strategy applies to --model mlp only$' \
  mpi "$apps/bench_train" --model lm --strategy tp
flag bench_train.opt_state_mlp 2 '^bench_train: --opt-state applies to --model lm only$' \
  mpi "$apps/bench_train" --opt-state sharded
flag bench_train.no_sequence_parallel_mlp 2 '^bench_train: --no-sequence-parallel applies to --model lm only$' \
  mpi "$apps/bench_train" --no-sequence-parallel
flag bench_train.opt_state_unknown 2 '^--opt-state: zero1 not in \{replicated,sharded\}$' \
  mpi "$apps/bench_train" --model lm --opt-state zero1
if [ "$ranks" -lt 4 ]; then
  expect bench_train.strategy_2d 2 "^bench_train: --strategy 2d needs an even rank count of 4 or more \\(data=2,model=<ranks>/2\\), got $ranks\$" \
    mpi "$apps/bench_train" --strategy 2d
fi
expect bench_train.does_not_fit 2 '^bench_train: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --strategy dp --depth 1000000 --layers 100
# Found in the forty-fifth session: an int64 count of the parameters overflowed before the check
# ("element count overflows: 4294967296 * 2147483648").
flag bench_train.depth_overflows_count 2 '^bench_train: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --depth 4294967296 --steps 1
flag bench_train.lm_width_overflows_count 2 '^bench_train: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --model lm --mesh data=2 --d-model 4294967296 --d-ff 4294967296 --heads 2
# Found on 2026-11-28: --steps 2^31 - 1 with a warmup step wrapped their int sum and the median
# of no steps crashed (SIGSEGV); 10^5 layers ran on with no output; a --seq-len of 10^8 passed the
# memory check on its parameters alone; --copy-mib 65536 ended in std::bad_alloc.
flag bench_train.steps_too_many 2 '^bench_train: --steps and --warmup must be <= 1000000, got 2147483647 and 1$' \
  mpi "$apps/bench_train" --steps 2147483647 --warmup 1
flag bench_train.layers_too_many 2 '^bench_train: --layers must be <= 10000, got 100000$' \
  mpi "$apps/bench_train" --depth 1 --layers 100000
expect bench_train.lm_activations_do_not_fit 2 '^bench_train: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --model lm --d-model 32 --heads 2 --d-ff 64 --layers 1 --seq-len 100000000 --batch 2
# Found in the forty-fourth session: the MLP's check counted its train state alone, and a batch of
# 2^28 at depth 8 went on to allocate the floor's products (8 GiB each); bench_checkpoint checked
# nothing and allocated its largest state (16 GiB tensors).
expect bench_train.batch_does_not_fit 2 '^bench_train: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --strategy dp --batch 4294967296 --depth 8 --layers 1
expect bench_checkpoint.state_does_not_fit 2 '^bench_checkpoint: needs [0-9]+\.[0-9] GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_checkpoint" --mesh "$mesh" --state large --large-layers 1024 --large-depth 65536 --dir "$work/bench_ckpt_big"
expect bench_train.copy_mib_does_not_fit 2 \
  '^bench_train: --copy-mib 65536: the copy measurement needs 128\.0 GiB per rank, this machine has [0-9]+\.[0-9] GiB$' \
  mpi "$apps/bench_train" --copy-mib 65536
# --layouts took any word (and measured the inner layout under it); sizes too small for every
# collective printed nothing and exited 0.
flag bench_collectives.layouts_unknown 2 '^--layouts: foo not in \{outer,inner\}$' \
  mpi "$apps/bench_collectives" --layouts foo
expect bench_collectives.no_size_runs 2 \
  "^bench_collectives: no message size from --min 1 to --max 100 \\(powers of 4 from --min\\) splits into 64 floats per rank on $ranks ranks for --ops\$" \
  mpi "$apps/bench_collectives" --min 1 --max 100
# scripts/scaling.sh refuses a bad command line before it runs anything.
once scaling.unknown_argument 2 "^scaling.sh: unknown argument '--bogus'" one bash "$here/../../scripts/scaling.sh" --bogus
once scaling.ranks_not_a_count 2 "^scaling.sh: --ranks: rank count must be an integer from 1 to 4096, got 'x'$" \
  one bash "$here/../../scripts/scaling.sh" --ranks "1 x"
# A count past int that mpirun would have truncated (4294967298 ran 2 ranks), and an --out that is a
# directory, refused before anything runs.
once scaling.ranks_too_many 2 "^scaling.sh: --ranks: rank count must be an integer from 1 to 4096, got '4294967298'$" \
  one bash "$here/../../scripts/scaling.sh" --ranks 4294967298
once scaling.out_is_a_directory 2 "^scaling.sh: --out '$work' is a directory$" \
  one bash "$here/../../scripts/scaling.sh" --ranks 1 --out "$work"
# The launchers check what mpirun's --quiet would hide: a program that is not there (exit code 132
# and no message before), a rank count past int (4294967298 ran 2 ranks), a hostfile that is a
# FIFO (awk waited for ever) or whose slots are not a count (exit 1, no message).
once launch.program_missing 2 "^local.sh: program '$apps/trian_mlp' does not exist\$" \
  one bash "$launch" 2 "$apps/trian_mlp"
once launch.ranks_past_int 2 "^local.sh: rank count must be an integer from 1 to 4096, got '4294967298'\$" \
  one bash "$launch" 4294967298 "$tm"
mkfifo "$work/hostfile_fifo"
printf 'localhost slots=abc\n' >"$work/hostfile_bad_slots"
once launch.hostfile_fifo 2 "^hostfile.sh: cannot read hostfile '$work/hostfile_fifo' \\(a readable regular file\\)\$" \
  one bash "$here/../../scripts/mpirun/hostfile.sh" "$work/hostfile_fifo" 2 "$tm"
once launch.hostfile_bad_slots 2 "^hostfile.sh: hostfile '$work/hostfile_bad_slots': line 1: slots=abc is not slots=N with N >= 1\$" \
  one bash "$here/../../scripts/mpirun/hostfile.sh" "$work/hostfile_bad_slots" 2 "$tm"
# scripts/cluster/mpirun.sh takes a HOSTS count of the hosts up (-1 took all but the last, 5 of 2
# took 2), checked before it enters a host: a cluster directory with a hostfile of two hosts.
mkdir -p "$work/cluster"
printf 'host1 slots=4\nhost2 slots=4\n' >"$work/cluster/hostfile"
once cluster.hosts_more_than_up 2 "^mpirun.sh: HOSTS must be 1 to 2 \\(the hosts up\\), got '5'\$" \
  one env TESSERA_CLUSTER_DIR="$work/cluster" bash "$here/../../scripts/cluster/mpirun.sh" 5 2 "$tm"
# A checkout whose path has whitespace (here a copy of the cluster scripts): the launcher's agent
# path would be split into programs; refused before anything enters a host (forty-fourth session).
# And the bytes between hosts with no cluster up: printed 0 and exited 0 until then.
mkdir -p "$work/a checkout/scripts" && cp -r "$here/../../scripts/cluster" "$work/a checkout/scripts/"
once cluster.checkout_path_with_space 2 "^mpirun.sh: the checkout's path '$work/a checkout/scripts/cluster' has whitespace, which the launcher's agent cannot carry\$" \
  one env TESSERA_CLUSTER_DIR="$work/cluster" bash "$work/a checkout/scripts/cluster/mpirun.sh" 1 2 "$tm"
once cluster.host_bytes_no_cluster 2 "^host_bytes.sh: no cluster up \(scripts/cluster/up.sh\)\$" \
  one env TESSERA_CLUSTER_DIR="$work/no_cluster" bash "$here/../../scripts/cluster/host_bytes.sh"
once fuzz.seconds_not_a_count 2 "^fuzz.sh: FUZZ_SECONDS must be an integer from 0 to 999999, got 'x'\$" \
  one env FUZZ_SECONDS=x bash "$here/../../scripts/fuzz.sh" parse_spec
# down.sh with TESSERA_CLUSTER_DIR naming a directory up.sh did not make: refused before anything is
# torn down (it deleted the namespaces of the cluster that was up); the directory is left whole.
mkdir -p "$work/user_dir"
printf 'keep\n' >"$work/user_dir/notes"
once cluster.down_not_a_cluster_dir 2 \
  "^down.sh: '$work/user_dir' is not a cluster's directory \\(no \\.tessera-cluster, which up.sh writes\\): nothing torn down\$" \
  one bash -c 'TESSERA_CLUSTER_DIR="$1" bash "$2"; rc=$?
    [ "$(cat "$1/notes")" = keep ] || { echo "the directory lost its file" >&2; exit 9; }
    exit $rc' _ "$work/user_dir" "$here/../../scripts/cluster/down.sh"
# bench_torch_lm.py checks its command line before it imports PyTorch: the same refusal with it or
# without (python3 here may have no PyTorch).
once bench_torch_lm.steps_zero 2 '^bench_torch_lm.py: --steps must be >= 1, got 0$' \
  one python3 "$here/../../scripts/bench_torch_lm.py" --steps 0
once bench_torch_lm.heads_do_not_split 2 \
  '^bench_torch_lm.py: --d-model 256 must split into --heads 3 of an even width \(rotary embeddings\)$' \
  one python3 "$here/../../scripts/bench_torch_lm.py" --heads 3
once bench_torch_lm.not_a_number 2 "^bench_torch_lm.py: argument --layers: invalid int value: 'x'\$" \
  one python3 "$here/../../scripts/bench_torch_lm.py" --layers x
# FUZZ_JOBS=0 made fuzz.sh's throttle spin for ever.
once fuzz.jobs_zero 2 "^fuzz.sh: FUZZ_JOBS must be an integer from 1 to 999, got '0'\$" \
  one env FUZZ_JOBS=0 bash "$here/../../scripts/fuzz.sh" parse_spec
once scaling.ranks_without_value 2 '^scaling.sh: --ranks needs a value$' one bash "$here/../../scripts/scaling.sh" --ranks
flag bench_checkpoint.large_layers_zero 2 '^bench_checkpoint: --large-layers must be between 1 and 1024, got 0$' \
  mpi "$apps/bench_checkpoint" --large-layers 0
expect bench_checkpoint.state_unknown 2 '--state: huge not in \{mlp,large,both\}' mpi "$apps/bench_checkpoint" --state huge
flag bench_checkpoint.repeats_zero 2 '^bench_checkpoint: --repeats must be >= 1, got 0$' mpi "$apps/bench_checkpoint" --repeats 0

# --- checkpoint files and directories ---------------------------------------------------------
good="$work/good"
bash "$launch" 1 "$tm" --mesh data=1,model=1 --depth 16 --layers 1 --batch 8 --steps 2 --quiet --ckpt-dir "$good" \
  >"$work/fixture.log" 2>&1 || { echo "FAIL: could not make the fixture checkpoint"; cat "$work/fixture.log"; exit 1; }
good_file=$(ls "$good"/ckpt_*.h5 | head -1)
ck="$apps/ckpt_tool"
mkdir -p "$work/empty_dir"
printf 'not an hdf5 file\n' >"$work/text.h5"
head -c 2000 "$good_file" >"$work/truncated.h5"
once ckpt_tool.no_subcommand 2 'A subcommand is required' one "$ck"
once ckpt_tool.missing_file 2 "ckpt_tool: .*'$work/nope.h5'" one "$ck" list "$work/nope.h5"
once ckpt_tool.empty_dir 2 "^ckpt_tool: list: directory '$work/empty_dir' holds no complete checkpoint \\(ckpt_<step>\\.h5\\)$" one "$ck" list "$work/empty_dir"
once ckpt_tool.not_hdf5 2 "'$work/text.h5'.*not an HDF5 file" one "$ck" verify "$work/text.h5"
once ckpt_tool.truncated 3 "'$work/truncated.h5'.*truncated file" one "$ck" list "$work/truncated.h5"
# Under mpirun every rank printed the whole report: one process reads the file.
if [ "$ranks" -gt 1 ]; then
  expect ckpt_tool.under_mpirun 2 "^ckpt_tool: runs as one process \\(it reads the file itself\\), not on $ranks ranks: start it without mpirun\$" \
    mpi "$ck" list "$good_file"
fi
# A FIFO given as a file is refused at once: open(2) of one waits for a process at its other end
# (core/files.h), and none ever opens these. A metrics file that cannot be written is reported
# and the run goes on without it (exit code 0).
mkfifo "$work/fifo.h5" "$work/data_fifo" "$work/metrics_fifo"
once ckpt_tool.list_fifo 2 "^ckpt_tool: file '$work/fifo.h5' is a FIFO, not a regular file\$" one "$ck" list "$work/fifo.h5"
once ckpt_tool.verify_fifo 2 "^ckpt_tool: file '$work/fifo.h5' is a FIFO, not a regular file\$" one "$ck" verify "$work/fifo.h5"
# bench_checkpoint works in a directory of its own inside --dir (tests/apps/bench_checkpoint_dir.sh).
expect bench_checkpoint.dir_is_a_file 2 "^bench_checkpoint: (rank 0: )?--dir '$work/text.h5': cannot create: Not a directory\$" \
  mpi "$apps/bench_checkpoint" --mesh "$mesh" --dir "$work/text.h5"
# 4 KiB of text: the held-out loss at the end then takes no time.
head -c 4096 /usr/share/common-licenses/GPL-3 >"$work/small_text"
tiny_lm=(--mesh "data=1,seq=1,model=$ranks" --steps 2 --eval-every 0 --d-model 32 --heads 8 --d-ff 64 --layers 1
  --seq-len 16 --batch 2 --quiet --sample-bytes 0)
expect train_lm.data_fifo 2 "^train_lm: --data: '$work/data_fifo' is a FIFO, not a regular file\$" \
  mpi "$apps/train_lm" "${tiny_lm[@]}" --data "$work/data_fifo"
expect train_mlp.metrics_fifo_unread 0 \
  "^train_mlp: metrics file '$work/metrics_fifo' is a FIFO that no process reads; continuing without\$" \
  mpi "$tm" "${small[@]}" --steps 2 --metrics "$work/metrics_fifo"
expect train_lm.metrics_directory 0 \
  "^train_lm: metrics file '$work/empty_dir' cannot be opened for writing: Is a directory; continuing without\$" \
  mpi "$apps/train_lm" "${tiny_lm[@]}" --data "$work/small_text" --metrics "$work/empty_dir"

mkdir -p "$work/resume_text"
cp "$work/text.h5" "$work/resume_text/ckpt_00000005.h5"
echo ckpt_00000005.h5 >"$work/resume_text/latest"
expect resume.not_hdf5 2 "'$work/resume_text/ckpt_00000005.h5'.*not an HDF5 file" \
  mpi "$tm" "${small[@]}" --steps 6 --resume --ckpt-dir "$work/resume_text"
expect resume.empty_dir 2 "train_mlp: --resume: no checkpoint in '$work/empty_dir'" \
  mpi "$tm" "${small[@]}" --resume --ckpt-dir "$work/empty_dir"
# A resume from a directory that is not there leaves none behind (until the forty-fifth session
# the lock made it, holding a .lock).
expect resume.missing_dir_not_made 2 "^train_mlp: --resume: no checkpoint in '$work/missing/sub' \\(no such directory\\)\$" \
  one bash -c 'bash "$1" "$2" "${@:4}"; rc=$?
    [ ! -e "$3" ] || { echo "the resume made '"'"'$3'"'"'" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/missing" "$tm" "${small[@]}" --resume --ckpt-dir "$work/missing/sub"
cp -r "$good" "$work/other_model"
# A resume continues the saved model and its data: a flag that fixes them and differs from the
# checkpoint's configuration is refused before anything is restored or written. With fewer
# --layers the restore took the layers it had and the first save dropped the others (the check
# after the run: the file is as it was); with another --depth the restore named a shape.
expect resume.other_model 2 \
  "^train_mlp: --resume: '$work/other_model/ckpt_00000002.h5' was saved with --depth 16, this run has --depth 32: a resume continues the saved model and its data \\(start a changed run in another --ckpt-dir\\)\$" \
  mpi "$tm" --mesh "$mesh" --depth 32 --layers 1 --batch 8 --quiet --steps 4 --resume --ckpt-dir "$work/other_model"
bash "$launch" 1 "$tm" --mesh data=1,model=1 --depth 16 --layers 2 --batch 8 --steps 2 --quiet --ckpt-dir "$work/two_layers" \
  >"$work/fixture2.log" 2>&1 || { echo "FAIL: could not make the two-layer fixture"; cat "$work/fixture2.log"; exit 1; }
expect resume.fewer_layers 2 \
  "^train_mlp: --resume: '$work/two_layers/ckpt_00000002.h5' was saved with --layers 2, this run has --layers 1: a resume continues" \
  one bash -c 'sum=$(md5sum <"$3/ckpt_00000002.h5"); bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(md5sum <"$3/ckpt_00000002.h5")" = "$sum" ] || { echo "the checkpoint changed" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/two_layers" "$tm" "${small[@]}" --steps 4 --resume --ckpt-dir "$work/two_layers"
cp -r "$good" "$work/other_program"
expect resume.other_program 2 "^train_lm: --resume: '$work/other_program/ckpt_00000002.h5' was saved by train_mlp, not by train_lm\$" \
  mpi "$apps/train_lm" "${tiny_lm[@]}" --data "$work/small_text" --steps 4 --resume --ckpt-dir "$work/other_program"
# train_lm's checkpoints name the text they trained on (its length and FNV-1a 64): a resume on
# other data was not compared until 2026-11-28 and trained the saved model on the new text.
bash "$launch" 1 "$apps/train_lm" "${tiny_lm[@]}" --mesh data=1,seq=1,model=1 --data "$work/small_text" \
  --ckpt-dir "$work/lm_other_data" >"$work/fixture_lm.log" 2>&1 ||
  { echo "FAIL: could not make the train_lm fixture"; cat "$work/fixture_lm.log"; exit 1; }
head -c 4096 /usr/share/common-licenses/Apache-2.0 >"$work/other_text"
expect resume.other_data 2 \
  "^train_lm: --resume: '$work/lm_other_data/ckpt_00000002.h5' was saved training on other data \\(4096 bytes, FNV-1a 64 [0-9a-f]{16}\\) than this run's --data \\(4096 bytes, FNV-1a 64 [0-9a-f]{16}\\): a resume continues the saved model and its data \\(start a changed run in another --ckpt-dir\\)\$" \
  mpi "$apps/train_lm" "${tiny_lm[@]}" --data "$work/other_text" --steps 4 --resume --ckpt-dir "$work/lm_other_data"
# Every flag a checkpoint's configuration fixes is compared on a resume, each named with the
# saved value and the run's: a key left out of the comparison resumed in silence (a --loss, --batch
# or --seq-len other than the saved run's trained on; --scan or --d-model failed the restore with
# another message). The checkpoints are left as they were. One key a program runs at every rank
# count; the others, which take the same path through the comparison, at 2 ranks only (`flag`).
kind=expect
for change in "scan false true --scan" "loss mse sum --loss sum" "input random ones --input ones" \
  "examples 64 32 --examples 32" "seed 0 5 --seed 5" "batch 8 16 --batch 16"; do
  read -r key then now flags <<<"$change"
  cp -r "$good" "$work/mlp_other_$key"
  "$kind" "resume.mlp_other_$key" 2 \
    "^train_mlp: --resume: '$work/mlp_other_$key/ckpt_00000002.h5' was saved with --$key $then, this run has --$key $now: a resume continues the saved model and its data \\(start a changed run in another --ckpt-dir\\)\$" \
    one bash -c 'sum=$(md5sum <"$3/ckpt_00000002.h5"); bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(md5sum <"$3/ckpt_00000002.h5")" = "$sum" ] || { echo "the checkpoint changed" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/mlp_other_$key" "$tm" "${small[@]}" $flags --steps 4 --resume \
    --ckpt-dir "$work/mlp_other_$key"
  kind=flag
done
kind=expect
for change in "layers 1 2" "d_model 32 64" "d_ff 64 128" "scan false true" "seq_len 16 8" "batch 2 4" "seed 0 5"; do
  read -r key then now <<<"$change"
  flag_name="--${key//_/-}"
  if [ "$key" = scan ]; then flags=(--scan); else flags=("$flag_name" "$now"); fi
  cp -r "$work/lm_other_data" "$work/lm_other_$key"
  "$kind" "resume.lm_other_$key" 2 \
    "^train_lm: --resume: '$work/lm_other_$key/ckpt_00000002.h5' was saved with $flag_name $then, this run has $flag_name $now: a resume continues the saved model and its data \\(start a changed run in another --ckpt-dir\\)\$" \
    mpi "$apps/train_lm" "${tiny_lm[@]}" "${flags[@]}" --data "$work/small_text" --steps 4 --resume --ckpt-dir "$work/lm_other_$key"
  kind=flag
done
# A resume past --steps would have ended at once and reported the checkpoint's later model as the
# run's result: refused, the directory left as it was.
cp -r "$good" "$work/steps_below"
expect resume.steps_below 2 \
  "^train_mlp: --resume: '$work/steps_below/ckpt_00000002.h5' is at step 2, past --steps 1: a resume trains on from the checkpoint's step \\(give --steps 2 or more, or start a new run in another --ckpt-dir\\)\$" \
  mpi "$tm" "${small[@]}" --steps 1 --resume --ckpt-dir "$work/steps_below"
# A rule's names are the user's text, stored in the checkpoint's config as a JSON string: names
# that spell a key (here "seed") stay inside it, and the resume still compares the run's own
# --seed (until the forty-fourth session the rules were stored unescaped, and this resumed).
rules_with_key='batch=data,hidden=model,"seed":0}x=model'
bash "$launch" 1 "$tm" --mesh data=1,model=1 --depth 16 --layers 1 --batch 8 --steps 1 --quiet --logical \
  --rules "$rules_with_key" --ckpt-dir "$work/rules_with_key" >"$work/fixture_rules.log" 2>&1 ||
  { echo "FAIL: could not make the rules fixture"; cat "$work/fixture_rules.log"; exit 1; }
expect resume.rules_spell_a_key 2 \
  "^train_mlp: --resume: '$work/rules_with_key/ckpt_00000001.h5' was saved with --seed 0, this run has --seed 7: a resume continues" \
  mpi "$tm" "${small[@]}" --steps 2 --logical --rules "$rules_with_key" --seed 7 --resume --ckpt-dir "$work/rules_with_key"
# --metrics naming a file the run reads or keeps: inside --ckpt-dir (a resume cut a checkpoint
# named there back to its last newline and appended JSON to it; a save's new `latest` replaced
# the metrics), the --data file, or another run's checkpoint, which a fresh run overwrote. Refused
# before anything is written; the checkpoint is left as it was (the check after the run).
mkdir -p "$work/metrics_in_dir"
expect metrics.inside_ckpt_dir 2 \
  "^train_mlp: --metrics '$work/metrics_in_dir/m.jsonl' is inside --ckpt-dir '$work/metrics_in_dir', which holds only the run's checkpoints; write the metrics elsewhere\$" \
  mpi "$tm" "${small[@]}" --steps 2 --ckpt-dir "$work/metrics_in_dir" --metrics "$work/metrics_in_dir/m.jsonl"
cp -r "$good" "$work/metrics_on_ckpt"
expect metrics.resume_onto_checkpoint 2 \
  "^train_mlp: --metrics '$work/metrics_on_ckpt/ckpt_00000002.h5' is inside --ckpt-dir '$work/metrics_on_ckpt', which holds only" \
  one bash -c 'sum=$(md5sum <"$3/ckpt_00000002.h5"); bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(md5sum <"$3/ckpt_00000002.h5")" = "$sum" ] || { echo "the checkpoint changed" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/metrics_on_ckpt" "$tm" "${small[@]}" --steps 4 --resume \
  --ckpt-dir "$work/metrics_on_ckpt" --metrics "$work/metrics_on_ckpt/ckpt_00000002.h5"
expect metrics.hdf5_file 2 \
  "^train_mlp: --metrics '$good_file' is an HDF5 file \\(a checkpoint\\?\\), not a metrics file; it is left as it is\$" \
  one bash -c 'sum=$(md5sum <"$3"); bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(md5sum <"$3")" = "$sum" ] || { echo "the checkpoint changed" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$good_file" "$tm" "${small[@]}" --steps 1 --metrics "$good_file"
expect metrics.is_data 2 \
  "^train_lm: --metrics '$work/small_text' is the --data file; write the metrics elsewhere\$" \
  mpi "$apps/train_lm" "${tiny_lm[@]}" --data "$work/small_text" --metrics "$work/small_text"
# A checkpoint renamed to a later step's name: the directory orders checkpoints by name, so it
# would be resumed from as the newest, and the resumed run's saves (--keep 2) would prune the
# checkpoints of the steps between. Refused; the directory is left as it was (the check after the
# run). ckpt_tool verify names the same disagreement.
mkdir -p "$work/renamed"
cp "$good_file" "$work/renamed/ckpt_00000009.h5"
cp "$good_file" "$work/renamed/$(basename "$good_file")"
expect resume.renamed_checkpoint 2 \
  "^train_mlp: (rank 0: )?restore_checkpoint: file '$work/renamed/ckpt_00000009.h5': attribute 'step' is 2 but the file's name is that of step 9 \\(renamed, or copied in from another run\\?\\)\$" \
  one bash -c 'bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(ls "$3")" = "$(printf "ckpt_00000002.h5\nckpt_00000009.h5")" ] || { echo "directory holds: $(ls "$3" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/renamed" "$tm" "${small[@]}" --steps 5 --save-every 1 --keep 2 --resume \
  --ckpt-dir "$work/renamed"
once ckpt_tool.verify_renamed 2 \
  "^ckpt_tool: file '$work/renamed/ckpt_00000009.h5': attribute 'step' is 2 but the file's name is that of step 9" \
  one "$ck" verify "$work/renamed/ckpt_00000009.h5"

# A fresh run into another run's directory: refused, nothing deleted.
cp -r "$good" "$work/taken"
expect ckpt_dir.fresh_run_into_other_run 2 "^train_mlp: --ckpt-dir '$work/taken' already holds checkpoints up to step 2 \\(ckpt_00000002.h5\\): --resume continues that run, --overwrite deletes them and starts over$" \
  mpi "$tm" "${small[@]}" --steps 4 --save-every 1 --keep 2 --ckpt-dir "$work/taken"
# --overwrite with a flag the run refuses: refused before the directory's checkpoints are removed
# (before, the loss's check ran after --overwrite had removed them; the check after the run).
cp -r "$good" "$work/overwrite_refused"
expect ckpt_dir.overwrite_then_refused 2 '^train_mlp: --loss xent needs the embed dimension unsplit, got P\(data, model\)$' \
  one bash -c 'bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(ls "$3")" = "$(printf "ckpt_00000002.h5\nlatest")" ] || { echo "directory holds: $(ls "$3" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/overwrite_refused" "$tm" "${small[@]}" --logical --rules batch=data,embed=model \
  --loss xent --steps 2 --overwrite --ckpt-dir "$work/overwrite_refused"
# --overwrite where a directory has a checkpoint's name: refused before the run (a save would fail
# there after the training), nothing removed.
cp -r "$good" "$work/overwrite_latest_dir"
rm "$work/overwrite_latest_dir/latest" && mkdir "$work/overwrite_latest_dir/latest"
expect ckpt_dir.overwrite_latest_is_a_directory 2 \
  "^train_mlp: checkpoint directory '$work/overwrite_latest_dir': '$work/overwrite_latest_dir/latest' is a directory where a checkpoint's file goes, so a save would fail there\$" \
  one bash -c 'bash "$1" "$2" "${@:4}"; rc=$?
    [ "$(ls "$3")" = "$(printf "ckpt_00000002.h5\nlatest")" ] || { echo "directory holds: $(ls "$3" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$launch" "$ranks" "$work/overwrite_latest_dir" "$tm" "${small[@]}" --steps 2 --overwrite \
  --ckpt-dir "$work/overwrite_latest_dir"
# A directory at the name of the checkpoint a save would write, and a directory path too long for
# the files' names: refused before the run trains (found on 2026-11-28: each failed the first
# save, after the training).
mkdir -p "$work/step_dir/ckpt_00000002.h5"
expect ckpt_dir.step_name_is_a_directory 2 \
  "^train_mlp: checkpoint directory '$work/step_dir': '$work/step_dir/ckpt_00000002.h5' is a directory where a checkpoint's file goes, so a save would fail there\$" \
  mpi "$tm" "${small[@]}" --steps 2 --ckpt-dir "$work/step_dir"
long_dir="$work/long"
while [ ${#long_dir} -lt 3880 ]; do long_dir="$long_dir/$(printf 'd%.0s' {1..200})"; done
long_dir="$long_dir/$(head -c $((4085 - ${#long_dir} - 1)) /dev/zero | tr '\0' d)"  # 4085 bytes: it can be made
expect ckpt_dir.path_too_long 2 "^train_mlp: checkpoint directory '.*': its path of [0-9]+ bytes leaves no room for its files' names" \
  mpi "$tm" "${small[@]}" --steps 2 --ckpt-dir "$long_dir"
# The directory is a symlink to nothing (until the forty-fifth session: "cannot create: File exists").
ln -sfn "$work/nowhere" "$work/dangling"
expect ckpt_dir.dangling_symlink 2 "^train_mlp: checkpoint directory '$work/dangling' is a symlink to '$work/nowhere', which does not exist\$" \
  mpi "$tm" "${small[@]}" --steps 2 --ckpt-dir "$work/dangling"
# The directory is a file.
printf 'x' >"$work/a_file"
expect ckpt_dir.is_a_file 2 "'$work/a_file'" mpi "$tm" "${small[@]}" --steps 2 --save-every 1 --ckpt-dir "$work/a_file"
# Another job holds the directory's lock (flock(1) stands in for it while the case runs).
mkdir -p "$work/locked"
exec {lockfd}>"$work/locked/.lock"
flock -n "$lockfd"
expect ckpt_dir.locked 2 "^train_mlp: checkpoint directory '$work/locked' is in use by another job" \
  mpi "$tm" "${small[@]}" --steps 2 --save-every 1 --ckpt-dir "$work/locked"
exec {lockfd}>&-
# A FIFO where the lock file goes is named (opened for reading and writing it does not wait).
mkdir -p "$work/lock_fifo"
mkfifo "$work/lock_fifo/.lock"
expect ckpt_dir.lock_is_a_fifo 2 \
  "^train_mlp: checkpoint directory '$work/lock_fifo': the lock file '$work/lock_fifo/.lock' is a FIFO, not a regular file\$" \
  mpi "$tm" "${small[@]}" --steps 2 --save-every 1 --ckpt-dir "$work/lock_fifo"
# A directory this user may not write, holding a lock file it may open (left by a run of this user
# before the directory became read-only to it): refused before the run trains, where the first
# save failed after it. Root writes any directory, so the case runs as nobody (setpriv), and is
# left out where the tests do not run as root; the directory is left as it was.
mkdir -p "$work/not_writable"
printf '' >"$work/not_writable/.lock" && chmod 666 "$work/not_writable/.lock" && chmod 755 "$work/not_writable"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" = 0 ] && "${as_nobody[@]}" test -x "$tm" 2>/dev/null; then
  expect ckpt_dir.not_writable 2 \
    "^train_mlp: checkpoint directory '$work/not_writable': this user cannot create files in it \\(Permission denied\\), so a save would fail there\$" \
    one bash -c '"${@:2}"; rc=$?
    [ "$(ls -A "$1")" = .lock ] || { echo "directory holds: $(ls -A "$1" | tr "\n" " ")" >&2; exit 9; }
    exit $rc' _ "$work/not_writable" "${as_nobody[@]}" bash "$launch" "$ranks" "$tm" "${small[@]}" --steps 2 \
    --ckpt-dir "$work/not_writable"
else
  echo "catalogue: ckpt_dir.not_writable left out: not root, or nobody cannot run $tm"
fi
# A disk without room for the checkpoint (a 16 KiB tmpfs, mounted in a mount namespace of the case's
# own) is named before the file is made: the save leaves nothing but the lock in the directory
# (the check after the run fails the case otherwise). Before, the MPI write failed with "input/output
# error" and left its partial file holding the space.
if unshare --mount true 2>/dev/null; then
  expect ckpt_dir.disk_full 2 \
    "^train_mlp: (rank 0: )?checkpoint directory '$work/full/run': not enough free space for the checkpoint of step 1: it needs [0-9]+ bytes, [0-9]+ are free\$" \
    one unshare --mount bash -c 'mkdir -p "$1" && mount -t tmpfs -o size=16k tmpfs "$1" || exit 9
      bash "$2" "$3" "$4" "${@:5}" --steps 2 --save-every 1 --ckpt-dir "$1/run"; rc=$?
      [ "$(ls -A "$1/run")" = .lock ] || { echo "directory holds: $(ls -A "$1/run" | tr "\n" " ")" >&2; exit 9; }
      exit $rc' _ "$work/full" "$launch" "$ranks" "$tm" "${small[@]}"
else
  echo "catalogue: ckpt_dir.disk_full left out: no mount namespace here (unshare --mount fails)"
fi
# Damaged files: an empty mesh_axis_sizes attribute, a negative optimizer step count.
damage="$build/tests/apps/ckpt_damage"
cp -r "$good" "$work/empty_sizes"
"$damage" "$(ls "$work/empty_sizes"/ckpt_*.h5 | head -1)" empty-mesh-sizes >/dev/null
once ckpt_tool.empty_mesh_axis_sizes 2 "^ckpt_tool: .*attribute 'mesh_axis_sizes' has 0 values but 'mesh_axis_names' has 2$" \
  one "$ck" list "$(ls "$work/empty_sizes"/ckpt_*.h5 | head -1)"
# read_checkpoint_info refuses this file, the restore does not need the mesh's sizes: a resume's
# checks of the saved run (here --steps) read the root alone, so they are not skipped (until
# the forty-fourth session a file read_checkpoint_info refused skipped them: the run resumed past
# --steps).
cp -r "$good" "$work/empty_sizes_steps"
"$damage" "$work/empty_sizes_steps/ckpt_00000002.h5" empty-mesh-sizes >/dev/null
expect resume.steps_below_mesh_unread 2 \
  "^train_mlp: --resume: '$work/empty_sizes_steps/ckpt_00000002.h5' is at step 2, past --steps 1: a resume trains on from the checkpoint's step" \
  mpi "$tm" "${small[@]}" --steps 1 --resume --ckpt-dir "$work/empty_sizes_steps"
cp -r "$good" "$work/negative_count"
"$damage" "$(ls "$work/negative_count"/ckpt_*.h5 | head -1)" count -5 >/dev/null
expect resume.negative_count 2 "^train_mlp: train state checkpoint: dataset '/opt_state/count' holds -5; an optimizer step count is >= 0$" \
  mpi "$tm" --mesh "$mesh" --depth 16 --layers 1 --batch 8 --quiet --steps 4 --resume --ckpt-dir "$work/negative_count"

# A flipped byte in a chunk: the resume fails its integrity check with exit code 3.
cp -r "$good" "$work/corrupt"
"$damage" "$(ls "$work/corrupt"/ckpt_*.h5 | head -1)" flip-chunk params/DotReluDot_0/W2 >/dev/null
expect resume.corrupt_chunk 3 "dataset '/params/DotReluDot_0/W2': data failed its Fletcher32 checksum \\(the file is corrupt\\)" \
  mpi "$tm" --mesh "$mesh" --depth 16 --layers 1 --batch 8 --quiet --steps 4 --resume --ckpt-dir "$work/corrupt"
once ckpt_tool.verify_corrupt_chunk 3 "^ckpt_tool: '$work/corrupt/ckpt_[0-9]+\\.h5' failed verification: 1 of 7 arrays$" one "$ck" verify "$work/corrupt"
finish
echo "catalogue ($ranks ranks): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
