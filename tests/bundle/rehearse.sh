#!/usr/bin/env bash
# Runs scripts/gpu-check.sh --rehearsal as on the GPU machine, here: in a private mount namespace
# where every library the bundle carries is hidden from the system (each file covered by an empty
# one, except those the system's python3 itself loads), as are Open MPI's and PMIx's trees, HDF5's,
# the CUDA toolkit, the project's build and venvs, with a plain venv holding only torch and its
# nvidia-* wheels, numpy and h5py (what the GPU machine's python3 has). A library the bundle lacks
# then fails to load, as it would there. Needs root (mount namespaces).
#
#   tests/bundle/rehearse.sh BUNDLE OUT_DIR [gpu-check arguments...]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=$(realpath "${1:?usage: rehearse.sh BUNDLE OUT_DIR}")
out=$(realpath -m "${2:?usage: rehearse.sh BUNDLE OUT_DIR}")
shift 2
[[ $(id -u) -eq 0 ]] || { echo "rehearse.sh: needs root (a mount namespace)" >&2; exit 77; }
site=$(cd "$repo" && .venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_root=$(dirname "$(readlink -f "$repo/.venv")")
build_dir=$(dirname "${DTUNE_BIN_DIR:-$repo/build/bin}")
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
# The python the project venv was made from (numpy's and h5py's wheels are built for its version).
sys_python=$(cd "$repo" && .venv/bin/python -c 'import os, sys; print(os.path.realpath(sys._base_executable))')
dynload=$("$sys_python" -c 'import sysconfig; print(sysconfig.get_config_var("DESTSHARED"))')
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dtune-rehearse.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The plain venv: system python3, no pip; its site-packages filled by bind mounts in the namespace.
"$sys_python" -m venv --without-pip "$scratch/venv"
plain_site=$("$scratch/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# torch with every distribution it requires (recursively), numpy and h5py: their site-packages entries.
mapfile -t carried < <(cd "$repo" && .venv/bin/python - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement

todo, seen, entries = ["torch", "numpy", "h5py"], set(), set()
while todo:
    name = todo.pop()
    dist = md.distribution(name)
    if dist.metadata["Name"].lower() in seen:
        continue
    seen.add(dist.metadata["Name"].lower())
    for r in dist.requires or []:
        req = Requirement(r)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            todo.append(req.name)
    entries.update(f.parts[0] for f in dist.files or [] if not f.parts[0].startswith(".."))
print("\n".join(sorted(e for e in entries if e not in ("__pycache__", "bin"))))
PY
)
# Libraries the system python3 loads (its own and its standard modules'): left visible.
keep=$( { ldd "$sys_python"; for m in "$dynload"/*.so; do ldd "$m"; done; } 2>/dev/null |
        awk '$2 == "=>" {print $1}' | sort -u)

unshare --mount --propagation private bash -s -- "$bundle" "$out" "$@" <<EOF
set -euo pipefail
for p in ${carried[*]}; do
  if [[ -d "$site/\$p" ]]; then mkdir -p "$plain_site/\$p"; else touch "$plain_site/\$p"; fi
  mount --bind "$site/\$p" "$plain_site/\$p"
done
hidden=0
# What the bundle carries, and (so that a bundle missing one still finds it hidden) the families the
# GPU machine lacks whatever the bundle holds.
families=\$(cd /usr/lib/$multiarch && ls | grep -E '^lib(mpi|open-pal|open-rte|hdf5|curl|turbojpeg|jpeg|png16|hwloc|pmix|event|sz|aec)[._-]' || true)
for lib in \$( (ls "$bundle/lib"; echo "\$families") | sort -u); do
  grep -qx "\$lib" <<<"$keep" && continue
  for d in /usr/lib/$multiarch /lib/$multiarch; do
    f="\$d/\$lib"
    [[ -e "\$f" ]] || continue
    mount --bind /dev/null "\$(readlink -f "\$f")" && hidden=\$((hidden + 1))
  done
done
for d in /usr/lib/$multiarch/openmpi /usr/lib/$multiarch/pmix2 /usr/lib/$multiarch/hdf5 /etc/openmpi \
         /usr/local/cuda "$venv_root" "$build_dir"; do
  [[ -d "\$d" ]] && mount -t tmpfs none "\$d"
done
for b in /usr/bin/orterun /usr/bin/orted /usr/bin/mpirun /usr/bin/mpiexec; do
  [[ -e "\$b" ]] && mount --bind /dev/null "\$(readlink -f "\$b")"
done
cd "$repo"  # as on the GPU machine; the build folder this may have started in is hidden now
echo "rehearse.sh: \$hidden system library files hidden; plain venv with: ${carried[*]}"
export PATH="$scratch/venv/bin:\$PATH" DTUNE_GPU_BUNDLE="\$1"
unset LD_LIBRARY_PATH PYTHONPATH DTUNE_BIN_DIR DTUNE_MPIRUN
bash "$repo/scripts/gpu-check.sh" "\$2" --rehearsal "\${@:3}"
EOF
