#!/usr/bin/env bash
# One-step setup for dtune: Debian packages, the pinned Python environment (torch ships LibTorch),
# configure and build. Idempotent: each step checks what is already there, so a second run on the
# same machine takes seconds. Both README commands (scripts/main.sh, scripts/test.sh) start here.
#
# Environment:
#   DTUNE_VENV_ROOT   where virtual environments live (default ~/.cache/dtune); each is named by the
#                     hash of requirements.txt, so fresh clones on one machine share it.
#   DTUNE_BUILD_DIR   build directory (default ./build)
#   DTUNE_BUILD_TYPE  CMake build type (default Release)
#   DTUNE_CMAKE_ARGS  extra CMake arguments (e.g. -DCUDAToolkit_ROOT=... -DNCCL_HOME=...)
#   DTUNE_SKIP_APT=1  do not touch system packages (clusters without root: load modules instead)
#   DTUNE_BUILD_TARGETS  build only these targets (space separated; default: all)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
log() { printf '[setup] %s\n' "$*"; }

# --- 1. Debian packages -------------------------------------------------------------------------
apt_packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  openmpi-bin libopenmpi-dev
  libhdf5-dev hdf5-tools
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libhwloc-dev
  python3 python3-venv python3-dev
  slurm-wlm munge chromium
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libcurl4-openssl-dev iproute2
)
if [[ "${DTUNE_SKIP_APT:-0}" != 1 ]] && command -v dpkg-query >/dev/null; then
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    log "Debian packages: all present"
  fi
fi

# --- 2. Python environment, keyed by the requirements' hash --------------------------------------
python_bin=${DTUNE_BOOTSTRAP_PYTHON:-python3}
req_hash=$(sha256sum requirements.txt | cut -c1-12)
venv_root=${DTUNE_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/dtune}
venv="$venv_root/venv-$req_hash"
fresh=0
if [[ ! -f "$venv/.dtune-complete" ]]; then
  log "creating Python environment $venv (torch and friends; a few minutes the first time)"
  rm -rf "$venv"
  mkdir -p "$venv_root"
  "$python_bin" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  # The file is a complete lock: --no-deps installs exactly it (and skips optional extras that
  # some packages declare as hard requirements, like HTA's notebook stack).
  "$venv/bin/python" -m pip install --quiet --no-deps -r requirements.txt
  touch "$venv/.dtune-complete"
  fresh=1
else
  log "Python environment: $venv"
fi
ln -sfn "$venv" .venv
# Every checkout that links an environment is listed in it (.dtune-checkouts), so that an older
# environment is removed only when no checkout links to it any more and no process has a file of
# it mapped (a clone that still runs on it, or a job started before its clone moved on). One whose
# checkouts were never listed (made by an older setup.sh) may be in use: it is left, and named.
grep -qxF "$repo" "$venv/.dtune-checkouts" 2>/dev/null || printf '%s\n' "$repo" >>"$venv/.dtune-checkouts"
env_in_use() {  # env_in_use DIR: 0 if a listed checkout links to DIR or a process maps a file of it
  local dir=$1 c real
  real=$(readlink -f "$dir")
  while IFS= read -r c; do
    [[ -n "$c" && "$(readlink -f "$c/.venv" 2>/dev/null)" == "$real" ]] && return 0
  done <"$dir/.dtune-checkouts"
  grep -qsF "$real/" /proc/[0-9]*/maps 2>/dev/null
}
if ((fresh)); then  # environments of older requirements files are ~5 GB each
  for old in "$venv_root"/venv-*; do
    [[ "$old" == "$venv" || ! -d "$old" ]] && continue
    if [[ ! -f "$old/.dtune-checkouts" ]]; then
      log "kept $old: made by an older setup.sh, which did not list its checkouts (remove it by hand when no clone uses it)"
    elif env_in_use "$old"; then
      log "kept $old: a checkout links to it or a process uses it"
    else
      log "removed $old: no checkout links to it and no process uses it"
      rm -rf "$old"
    fi
  done
fi

# --- 3. Configure and build ----------------------------------------------------------------------
build_dir=${DTUNE_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ccache}
# CMake finds LibTorch through the checkout's .venv link, not the environment's own path: the
# compiler then sees the same include paths whichever environment the link names (ccache's base_dir
# makes them relative to the checkout), so a new requirements file or a clean clone reuses the
# cached objects instead of recompiling every torch file. The environment it was configured with is
# recorded beside the build, and a change of it configures again.
if [[ ! -f "$build_dir/build.ninja" ]] || [[ "$(cat "$build_dir/.dtune-venv" 2>/dev/null)" != "$venv" ]] ||
  ! grep -q "DTUNE_PYTHON:FILEPATH=$repo/.venv/bin/python" "$build_dir/CMakeCache.txt" 2>/dev/null; then
  log "configuring $build_dir"
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="${DTUNE_BUILD_TYPE:-Release}" \
    -DDTUNE_PYTHON:FILEPATH="$repo/.venv/bin/python" \
    ${DTUNE_CMAKE_ARGS:-}
  mkdir -p "$build_dir" && printf '%s\n' "$venv" >"$build_dir/.dtune-venv"
fi
# DTUNE_BUILD_TARGETS (space separated): only those targets, as scripts/main.sh builds the binaries
# its job runs; unset: everything, the tests included.
if [[ -n "${DTUNE_BUILD_TARGETS:-}" ]]; then
  log "building $DTUNE_BUILD_TARGETS with $jobs jobs"
  # shellcheck disable=SC2086
  cmake --build "$build_dir" -j "$jobs" --target $DTUNE_BUILD_TARGETS
else
  log "building with $jobs jobs"
  cmake --build "$build_dir" -j "$jobs"
fi
log "done: binaries in $build_dir/bin, Python environment in .venv"
