#!/usr/bin/env bash
# ckpt_dir_rules.sh WORKDIR COMMAND...: COMMAND (train_mlp or train_lm under mpirun). A fresh
# run into a directory holding another run's checkpoints is refused (exit 2, one message, nothing
# touched); --overwrite starts over and `latest` names a file that exists; a directory locked
# by another job is refused naming the holder, and a stale lock file is taken over; symlinks
# planted at the temporary names are never followed.
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
dir="$work/ckpt"
fail() { echo "FAIL: $*" >&2; exit 1; }
prog=train_mlp  # the program the messages name: the command's train_* executable
for arg in "$@"; do [[ $(basename -- "$arg") == train_* ]] && prog=$(basename -- "$arg"); done
once() {  # once RC PATTERN OUTPUT
  [ "$(grep -cF -- "$2" <<<"$3")" -eq 1 ] || { echo "$3" >&2; fail "'$2' not printed exactly once"; }
}

"$@" --steps 20 --save-every 10 --keep 2 --ckpt-dir "$dir" >/dev/null || fail "first run"
before=$(cd "$dir" && ls -l --time-style=full-iso ckpt_* latest && cat latest)

# 1. A fresh run is refused before anything is written.
out=$(timeout 10 "$@" --steps 5 --keep 2 --ckpt-dir "$dir" 2>&1); rc=$?
[ $rc -eq 2 ] || { echo "$out" >&2; fail "fresh run into a used directory exited $rc, expected 2"; }
once 2 "$prog: --ckpt-dir '$dir' already holds checkpoints up to step 20 (ckpt_00000020.h5): --resume continues that run, --overwrite deletes them and starts over" "$out"
after=$(cd "$dir" && ls -l --time-style=full-iso ckpt_* latest && cat latest)
[ "$before" = "$after" ] || fail "the refused run changed the directory: $before / $after"

# 2. --overwrite with --resume is refused; --overwrite alone starts over.
out=$(timeout 10 "$@" --steps 5 --ckpt-dir "$dir" --resume --overwrite 2>&1); rc=$?
[ $rc -eq 2 ] || fail "--resume --overwrite exited $rc"
once 2 "$prog: --resume and --overwrite exclude each other" "$out"
echo keep-me > "$dir/notes.txt"
"$@" --steps 5 --keep 2 --ckpt-dir "$dir" --overwrite >/dev/null || fail "--overwrite run"
[ "$(cd "$dir" && ls ckpt_*)" = "ckpt_00000005.h5" ] || fail "after --overwrite: $(ls "$dir")"
[ "$(cat "$dir/latest")" = "ckpt_00000005.h5" ] || fail "latest names $(cat "$dir/latest")"
[ -f "$dir/notes.txt" ] || fail "--overwrite removed a file that is not a checkpoint"

# 3. A directory locked by another job (flock held by a live process) is refused.
printf 'host otherhost pid 4242\n' > "$dir/.lock"
# One process holds the lock and is killed below (so nothing else inherits the descriptor).
( exec 9<>"$dir/.lock"; flock -n 9 || exit 1; exec sleep 30 ) &
holder=$!
sleep 0.5
out=$(timeout 10 "$@" --steps 8 --ckpt-dir "$dir" --resume 2>&1); rc=$?
kill "$holder"; wait "$holder" 2>/dev/null
[ $rc -eq 2 ] || { echo "$out" >&2; fail "run into a locked directory exited $rc, expected 2"; }
once 2 "$prog: checkpoint directory '$dir' is in use by another job (lock '$dir/.lock' held by host otherhost pid 4242)" "$out"
# The holder is gone: its file stays, stale, and the next run takes the lock over.
"$@" --steps 8 --ckpt-dir "$dir" --resume >/dev/null || fail "run after the lock's holder died"
grep -q "^host .* pid [0-9]*$" "$dir/.lock" || fail "lock file holds '$(cat "$dir/.lock")'"

# 4. Symlinks planted at the temporary names are removed, never written through.
echo precious > "$work/victim1"; echo precious > "$work/victim2"
ln -s "$work/victim1" "$dir/ckpt_00000010.h5.tmp"
ln -s "$work/victim2" "$dir/latest.tmp"
"$@" --steps 10 --ckpt-dir "$dir" --resume >/dev/null || fail "run with planted symlinks"
[ "$(cat "$work/victim1")$(cat "$work/victim2")" = "preciousprecious" ] || fail "a planted symlink was followed"
[ -f "$dir/ckpt_00000010.h5" ] && [ ! -L "$dir/ckpt_00000010.h5" ] || fail "ckpt_00000010.h5 is not a regular file"
[ "$(cat "$dir/latest")" = "ckpt_00000010.h5" ] || fail "latest names $(cat "$dir/latest")"
echo "ok: fresh-run rule, --overwrite, lock, stale lock, planted symlinks"
