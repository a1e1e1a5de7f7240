#!/usr/bin/env bash
# run_sh_check.sh ROOT: scripts/run.sh (the main job) in a copy of the checkout whose build.sh,
# mpirun/local.sh and plot_metrics are stand-ins that write down their arguments, so that no
# build and no training runs: the 8-rank train_mlp line with its defaults (TESSERA_RUN_STEPS
# for the steps) and --overwrite only for its own checkpoint directory without --resume, the
# extra arguments passed as they are (spaces kept), the metrics file the plots read (--metrics
# FILE / --metrics=FILE, relative to the caller's directory, which run.sh keeps), --help /
# -h / --version run on 1 rank with no training and no plots, a failing build's log with exit 1,
# and a failing run's exit code with no plots; the build log's temporary file removed after a run.
set -euo pipefail
root=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy="$work/checkout"
mkdir -p "$copy/scripts/mpirun" "$work/elsewhere" "$work/tmp"
cp "$root/scripts/run.sh" "$copy/scripts/"
cat >"$copy/scripts/build.sh" <<'EOF'
#!/usr/bin/env bash
echo "[  5%] Building CXX object one"
echo "[100%] Built target two"
if [ "${STUB_BUILD_RC:-0}" != 0 ]; then echo "error: the stand-in build fails" >&2; fi
exit "${STUB_BUILD_RC:-0}"
EOF
cat >"$copy/scripts/mpirun/local.sh" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$STUB_DIR/local_args"
exit "${STUB_RUN_RC:-0}"
EOF
cat >"$copy/scripts/plot_metrics" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$PWD" "$@" >"$STUB_DIR/plot_args"
EOF
chmod +x "$copy/scripts/plot_metrics"
export STUB_DIR=$work
unset TESSERA_RUN_STEPS STUB_BUILD_RC STUB_RUN_RC
b="$copy/build"
defaults() {  # defaults STEPS: run.sh's own train_mlp arguments
  printf '%s\n' 8 "$b/apps/train_mlp" --mesh data=2,model=4 --steps "$1" --metrics "$b/train_mlp_metrics.jsonl" \
    --ckpt-dir "$b/checkpoints" --save-every 100 --keep 2
}
# job LABEL WANT_LOCAL WANT_PLOT ARGS...: run.sh ARGS from $work/elsewhere exits 0, local.sh got
# exactly WANT_LOCAL (lines) and plot_metrics WANT_PLOT (its directory, then its arguments).
job() {
  local label=$1 want_local=$2 want_plot=$3
  shift 3
  rm -f "$work/local_args" "$work/plot_args"
  local out
  out=$(cd "$work/elsewhere" && TMPDIR="$work/tmp" bash "$copy/scripts/run.sh" "$@") || fail "$label: exit $?"
  # --help and the like too, where run.sh execs local.sh and its EXIT trap never runs (until the
  # forty-eighth session they left the build's log behind, one file a call).
  [ -z "$(ls -A "$work/tmp")" ] || fail "$label: run.sh left $(ls -A "$work/tmp") in its TMPDIR"
  rm -rf "$work/tmp" && mkdir "$work/tmp"
  [ "$(cat "$work/local_args")" = "$want_local" ] ||
    fail "$label: local.sh got"$'\n'"$(cat "$work/local_args")"$'\n'"want"$'\n'"$want_local"
  if [ -z "$want_plot" ]; then
    [ ! -e "$work/plot_args" ] || fail "$label: plot_metrics ran ($(cat "$work/plot_args"))"
    [ "$out" = $'\r''build:   5%'$'\r''build: 100%'$'\r''build: done' ] || fail "$label: stdout '$out'"
  else
    [ "$(cat "$work/plot_args")" = "$want_plot" ] ||
      fail "$label: plot_metrics got"$'\n'"$(cat "$work/plot_args")"$'\n'"want"$'\n'"$want_plot"
    [ "$out" = $'\r''build:   5%'$'\r''build: 100%'$'\r''build: done'$'\n''plots of this run:' ] ||
      fail "$label: stdout '$out'"
  fi
}
plot() { printf '%s\n' "$work/elsewhere" -o "$b/plots" "$1"; }
job "run.sh" "$(defaults 300; echo --overwrite)" "$(plot "$b/train_mlp_metrics.jsonl")"
TESSERA_RUN_STEPS=7 job "TESSERA_RUN_STEPS=7 run.sh" "$(defaults 7; echo --overwrite)" "$(plot "$b/train_mlp_metrics.jsonl")"
job "run.sh --steps 50 --scan" "$(defaults 300; printf '%s\n' --overwrite --steps 50 --scan)" \
  "$(plot "$b/train_mlp_metrics.jsonl")" --steps 50 --scan
job "run.sh --resume" "$(defaults 300; echo --resume)" "$(plot "$b/train_mlp_metrics.jsonl")" --resume
job "run.sh --ckpt-dir 'my ckpt'" "$(defaults 300; printf '%s\n' --ckpt-dir 'my ckpt')" \
  "$(plot "$b/train_mlp_metrics.jsonl")" --ckpt-dir 'my ckpt'
job "run.sh --ckpt-dir=c" "$(defaults 300; printf '%s\n' --ckpt-dir=c)" "$(plot "$b/train_mlp_metrics.jsonl")" --ckpt-dir=c
job "run.sh --metrics 'm 1.jsonl'" "$(defaults 300; printf '%s\n' --overwrite --quiet --metrics 'm 1.jsonl')" \
  "$(plot 'm 1.jsonl')" --quiet --metrics 'm 1.jsonl'
job "run.sh --metrics=m2.jsonl" "$(defaults 300; printf '%s\n' --overwrite --metrics=m2.jsonl)" "$(plot m2.jsonl)" \
  --metrics=m2.jsonl
echo "ok: run.sh's train_mlp line and the metrics its plots read"
for flag in --help -h --version; do
  job "run.sh --steps 5 $flag" "$(printf '%s\n' 1 "$b/apps/train_mlp" --steps 5 "$flag")" "" --steps 5 "$flag"
done
echo "ok: run.sh --help, -h and --version run train_mlp on 1 rank, no training, no plots"
# A failing build: its whole log on stderr, one line of run.sh's, exit 1, nothing run.
rm -f "$work/local_args" "$work/plot_args"
rc=0
(cd "$work/elsewhere" && STUB_BUILD_RC=3 bash "$copy/scripts/run.sh") >"$work/out" 2>"$work/err" || rc=$?
[ "$rc" = 1 ] || fail "a failing build: exit $rc, 1 expected"
[ "$(cat "$work/err")" = "[  5%] Building CXX object one
[100%] Built target two
error: the stand-in build fails
run.sh: the build failed (log above)" ] || fail "a failing build: stderr '$(cat "$work/err")'"
[ ! -e "$work/local_args" ] && [ ! -e "$work/plot_args" ] || fail "a failing build: the job ran"
# A failing run: its exit code, no plots.
rm -f "$work/local_args" "$work/plot_args"
rc=0
(cd "$work/elsewhere" && STUB_RUN_RC=4 bash "$copy/scripts/run.sh") >"$work/out" 2>"$work/err" || rc=$?
[ "$rc" = 4 ] || fail "a failing run: exit $rc, 4 expected"
[ ! -e "$work/plot_args" ] || fail "a failing run: plot_metrics ran"
echo "ok: a failing build exits 1 with its log, a failing run with its exit code and no plots"
