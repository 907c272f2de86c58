#!/usr/bin/env bash
# Builds the GPU bundle: the dtune binaries, every test binary of the ctest label gpu (read from
# ctest; GPU_TESTS lists its entries with their filters), and every shared library they need that
# a GPU machine with only a torch wheel lacks (Open MPI with its runtime, components and PMIx, HDF5,
# libcurl, libjpeg-turbo, libpng, hwloc, libstdc++ and their dependencies), in one relocatable
# folder (default .gpu/, git-ignored) to carry to that machine. No torch and no CUDA library goes
# in: at run time .gpu/env.sh finds them in the python3 there (torch/lib and the nvidia-* wheels).
#
#   bash scripts/gpu-bundle.sh [--out DIR] [--build-dir DIR] [--max-mib N]
#
# On the GPU machine: `bash scripts/gpu-check.sh OUT_DIR` (it sources .gpu/env.sh), or by hand
# `source .gpu/env.sh; dtune-train --device cuda ...`. It prints the bundle's size and fails above
# 60 MiB (what one carry may hold, with room for the sources). doc/gpu.md tells the whole story.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$repo/.gpu"
build="$repo/${DTUNE_BUILD_DIR:-build}"
max_mib=60
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-bundle.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$(realpath -m "${2:?--out needs a folder}"); shift 2 ;;
    --build-dir) build=$(realpath -m "${2:?--build-dir needs a folder}"); shift 2 ;;
    --max-mib) max_mib=${2:?--max-mib needs a number}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -f "$build/build.ninja" ]] || die "no build in $build: run 'bash scripts/setup.sh' first"
python="$repo/.venv/bin/python"
[[ -x "$python" ]] || die "no project venv (.venv): run 'bash scripts/setup.sh' first"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ompi_libdir=/usr/lib/$multiarch/openmpi/lib
pmix_dir=/usr/lib/$multiarch/pmix2
[[ -d "$ompi_libdir/openmpi3" ]] || die "Open MPI's components are not in $ompi_libdir/openmpi3 (Debian's libopenmpi3 expected)"

build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
[[ "$build_type" == Release ]] ||
  die "$build is a '${build_type:-no type}' build; the bundle carries a Release build (DTUNE_BUILD_TYPE=Release bash scripts/setup.sh, or --build-dir)"
echo "gpu-bundle.sh: bringing $build up to date"
cmake --build "$build" -j "$(nproc)" >/dev/null

# torch's and the nvidia wheels' library folders, here: what must resolve but never be copied.
mapfile -t site_libs < <("$python" - <<'PY'
import importlib.util, pathlib
torch = pathlib.Path(importlib.util.find_spec("torch").origin).parent
print(torch / "lib")
nvidia = importlib.util.find_spec("nvidia")
for root in nvidia.submodule_search_locations if nvidia else []:
    for lib in sorted(pathlib.Path(root).glob("*/lib")):
        print(lib)
PY
)
torch_version=$("$python" -c 'import importlib.metadata as m; print(m.version("torch"))')
site_path=$(IFS=:; echo "${site_libs[*]}")

tmp="$out.partial"
rm -rf "$tmp"
mkdir -p "$tmp"/{bin,lib,py} "$tmp/ompi/bin" "$tmp/ompi/lib/$multiarch/openmpi/lib" "$tmp/ompi/share" \
  "$tmp/pmix/lib" "$tmp/pmix/share"

# 1. Our binaries: the tools (dtune-*) and every executable that a ctest entry of the gpu label
# runs, read from ctest itself, so that a new gpu test binary is bundled without editing this file.
# GPU_TESTS lists those entries (the programs, their gtest filters, mpirun's -np; the pytest files)
# for gpu-check.sh, which has no ctest there.
(cd "$build" && ctest -N -L '^gpu$' --show-only=json-v1) >"$tmp/ctest.json" ||
  die "ctest cannot list the gpu label in $build"
# One line per ctest entry, tab-separated: gtest NAME NP PROGRAM ARGS... (PROGRAM a file of
# $build/bin; NP 1, or mpirun's -np) or pytest NAME 1 FILE (relative to the repository).
"$python" - "$tmp/ctest.json" "$build/bin" "$repo" >"$tmp/GPU_TESTS" <<'PY' ||
import json, os, sys

listing, bin_dir, repo = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
for t in json.load(open(listing))["tests"]:
    cmd, name = t.get("command") or [], t["name"]
    if "pytest" in cmd:
        files = [c for c in cmd if c.endswith(".py")]
        assert len(files) == 1, (name, cmd)
        print("pytest", name, 1, os.path.relpath(files[0], repo), sep="\t")
        continue
    at = [i for i, c in enumerate(cmd) if os.path.dirname(os.path.realpath(c)) == bin_dir]
    assert at, f"{name}: no program of {bin_dir} in {cmd}"
    np_ = cmd[cmd.index("-np") + 1] if "-np" in cmd[: at[0]] else "1"
    print("gtest", name, np_, os.path.basename(cmd[at[0]]), *cmd[at[0] + 1 :], sep="\t")
PY
  die "cannot read ctest's gpu label (above)"
rm "$tmp/ctest.json"
tools=()
for exe in "$build"/bin/dtune-*; do [[ -f "$exe" && -x "$exe" ]] && tools+=("$exe"); done
mapfile -t -O "${#tools[@]}" tools < <(awk -F'\t' -v b="$build/bin" '$1 == "gtest" {print b "/" $4}' \
  "$tmp/GPU_TESTS" | sort -u)
cp "${tools[@]}" "$tmp/bin/"
# Without their symbol tables (a Release build has no debug information to lose): 15% smaller.
strip --strip-unneeded "$tmp"/bin/*

# 2. Open MPI's runtime (mpirun, orted, its components and help texts) and PMIx's plugins, laid out
# as under /usr so that OPAL_PREFIX and PMIX_PREFIX relocate them. Components for fabrics a single
# GPU machine without a network lacks (UCX, libfabric, verbs, PSM) are left out rather than loaded
# without their libraries, and so is OpenSHMEM's (liboshmem: dtune calls MPI only). ldd's output is
# read whole before it is searched: under pipefail, `ldd | grep -q` fails whenever grep's early exit
# gets ldd a SIGPIPE, which let a UCX component and its libraries in on some runs and not others.
cp /usr/bin/orterun /usr/bin/orted "$tmp/ompi/bin/"
ln -s orterun "$tmp/ompi/bin/mpirun"
ln -s orterun "$tmp/ompi/bin/mpiexec"
mkdir -p "$tmp/ompi/lib/$multiarch/openmpi/lib/openmpi3"
for comp in "$ompi_libdir"/openmpi3/*.so; do
  needs=$(ldd "$comp" 2>/dev/null || true)
  if grep -qE 'libuc[pstm]|libfabric|libibverbs|libpsm|librdmacm|libefa|liboshmem' <<<"$needs"; then
    continue
  fi
  cp "$comp" "$tmp/ompi/lib/$multiarch/openmpi/lib/openmpi3/"
done
cp -r /usr/share/openmpi "$tmp/ompi/share/"
if [[ -d "$pmix_dir/lib/pmix" ]]; then
  cp -r "$pmix_dir/lib/pmix" "$tmp/pmix/lib/"
  cp -r "$pmix_dir/share/pmix" "$tmp/pmix/share/"
fi

# 3. Every library those ELF files need, except glibc's own (the machine's C library must match
# its loader), torch's and CUDA's (the GPU machine's, found at run time).
is_glibc() {
  case "$1" in
    ld-linux*|libc.so.*|libm.so.*|libmvec.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|\
    libutil.so.*|libanl.so.*|libnss_*|libBrokenLocale.so.*|libthread_db.so.*|libc_malloc_debug.so.*|\
    linux-vdso.so.*) return 0 ;;
  esac
  return 1
}
is_elf() { [[ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" == '177ELF' ]]; }
mapfile -t elves < <(find "$tmp/bin" "$tmp/ompi" "$tmp/pmix" -type f | while read -r f; do is_elf "$f" && echo "$f"; done)
declare -A copied=()
missing=()
for elf in "${elves[@]}"; do
  while read -r name path; do
    if is_glibc "$name"; then continue; fi
    if [[ "$path" == "not found" ]]; then missing+=("$name (needed by ${elf#"$tmp"/})"); continue; fi
    case "$path" in
      */torch/lib/*|*/site-packages/nvidia/*|/usr/local/cuda*|*/libcuda.so*|*/libnvidia-*) continue ;;
    esac
    [[ -n "${copied[$name]:-}" ]] && continue
    cp -L "$path" "$tmp/lib/$name"
    copied[$name]=$path
  done < <(LD_LIBRARY_PATH="$ompi_libdir:$site_path" ldd "$elf" 2>/dev/null |
           awk '$2 == "=>" && $3 != "" { p = $3; if ($3 == "not") p = "not found"; print $1, p }')
done
if [[ ${#missing[@]} -gt 0 ]]; then
  printf '  %s\n' "${missing[@]}" | sort -u >&2
  die "the libraries above are not found here; install them (scripts/setup.sh) and rerun"
fi

# 3b. nvJPEG for --decode nvjpeg: dlopened (ldd does not list it), and the torch wheel does not
# bring it, so the GPU machine's python has none: the venv's pinned nvidia-nvjpeg is carried.
nvjpeg=$("$python" -c 'import glob, importlib.util, os
s = importlib.util.find_spec("nvidia")
print(next(iter(sorted(f for d in (s.submodule_search_locations if s else []) for f in glob.glob(os.path.join(d, "*", "lib", "libnvjpeg.so.13")))), ""))')
[[ -n "$nvjpeg" ]] || die "no libnvjpeg.so.13 in the venv's nvidia-nvjpeg: run 'bash scripts/setup.sh' (requirements.txt pins it)"
cp -L "$nvjpeg" "$tmp/lib/"

# 4. pytest (pure Python) for the gpu label's Python tests; the GPU machine's python3 has torch,
# numpy and h5py but no pytest.
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for pkg in pytest _pytest pluggy iniconfig packaging pygments py.py; do
  [[ -e "$site/$pkg" ]] && cp -r "$site/$pkg" "$tmp/py/"
done
find "$tmp/py" -name __pycache__ -prune -exec rm -rf {} +
# pytest imports pygments' Python and diff lexers by module; its other 250-odd lexers (4.5 MiB, more
# than libnvjpeg) are only found by name through _mapping, which nothing here asks for.
find "$tmp/py/pygments/lexers" -maxdepth 1 -type f ! -name __init__.py ! -name _mapping.py ! -name python.py \
  ! -name diff.py -delete

# 5. What the machine must provide: the newest glibc symbol version any bundled file uses.
glibc_min=$(for f in "$tmp"/bin/* "$tmp"/lib/* "$tmp"/ompi/bin/orte*; do
              readelf -W --version-info "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*'
            done | sed 's/GLIBC_//' | sort -u -V | tail -1)
cp "$repo/scripts/gpu-env.sh" "$tmp/env.sh"
{
  echo "torch_version=$torch_version"
  echo "glibc_min=$glibc_min"
  echo "multiarch=$multiarch"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build_type=$build_type"
  echo "commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo -dirty)"
  echo "binaries=$(cd "$tmp/bin" && ls | tr '\n' ' ')"
} >"$tmp/MANIFEST"
(cd "$tmp/lib" && ls) >"$tmp/LIBRARIES"

size=$(du -sb "$tmp" | cut -f1)
mib=$(( (size + 1048575) / 1048576 ))
if (( mib > max_mib )); then
  du -sh "$tmp"/* >&2
  echo "the largest files:" >&2
  find "$tmp" -type f -printf '%s %P\n' | sort -rn | head -15 |
    awk '{ printf "  %6.2f MiB  %s\n", $1 / 1048576, $2 }' >&2
  rm -rf "$tmp"
  die "the bundle is $mib MiB, above the $max_mib MiB a carry may hold"
fi
rm -rf "$out"
mv "$tmp" "$out"
echo "gpu-bundle.sh: $out: $mib MiB ($(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries," \
  "Open MPI runtime); built against torch $torch_version, needs glibc >= $glibc_min"
