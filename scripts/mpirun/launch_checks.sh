# Sourced by local.sh and hostfile.sh: checks of a launch's arguments before mpirun, whose own
# complaints --quiet hides (a program that is not there ended the job with exit code 132 and no
# message; a rank count past int was truncated, 4294967298 ran 2 ranks).

# check_rank_count SCRIPT N: N is an integer from 1 to 4096, or the script exits 2.
check_rank_count() {
  if ! [[ "$2" =~ ^[1-9][0-9]{0,3}$ ]] || [ "$2" -gt 4096 ]; then
    echo "$1: rank count must be an integer from 1 to 4096, got '$2'" >&2
    exit 2
  fi
}

# check_program SCRIPT PROGRAM: PROGRAM is an executable file (a path) or a command on PATH.
check_program() {
  local path=$2
  if [[ "$path" != */* ]]; then
    path=$(type -P -- "$path") || { echo "$1: no program '$2' on PATH" >&2; exit 2; }
  fi
  if [ ! -e "$path" ]; then echo "$1: program '$2' does not exist" >&2; exit 2; fi
  if [ -d "$path" ] || [ ! -x "$path" ]; then echo "$1: '$2' is not an executable file" >&2; exit 2; fi
}
