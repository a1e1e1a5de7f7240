#!/usr/bin/env bash
# Installs the Debian packages tessera builds with, when they are missing. Safe to run twice.
# Needs root (or sudo) only when something is missing. TESSERA_SETUP_TORCH=1 adds python3-torch.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libeigen3-dev
  libhdf5-openmpi-dev hdf5-tools zlib1g-dev
  googletest libgtest-dev libgmock-dev
  libcli11-dev
  python3-matplotlib
  clang libclang-rt-14-dev lld
  iproute2 util-linux bc
  munge slurmctld slurmd slurm-client
)
# The PyTorch reference of bench_train's transformer (scripts/bench_torch_lm.py), a comparison
# outside the tests: only on request, as it brings about 160 packages.
if [ "${TESSERA_SETUP_TORCH:-0}" = 1 ]; then
  packages+=(python3-torch)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "setup: missing packages (${missing[*]}) and not root; install them as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
