# dtune's GPU bundle environment: `source .gpu/env.sh` (scripts/gpu-bundle.sh copies this file
# there). It puts the bundle's binaries, Open MPI and libraries first, and finds torch's and the
# nvidia-* wheels' libraries through the python3 on PATH (or $DTUNE_PYTHON) without importing
# torch. It fails, with the reason, when that python has no torch.
_dtune_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_dtune_py=${DTUNE_PYTHON:-python3}
if ! _dtune_libs=$("$_dtune_py" - 2>&1 <<'PY'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("torch")
if spec is None or spec.origin is None:
    sys.exit(f"{sys.executable} has no torch")
dirs = [pathlib.Path(spec.origin).parent / "lib"]
nvidia = importlib.util.find_spec("nvidia")
for root in nvidia.submodule_search_locations if nvidia else []:
    dirs += sorted(pathlib.Path(root).glob("*/lib"))
print(":".join(str(d) for d in dirs))
PY
); then
  echo "env.sh: cannot find torch's libraries with $_dtune_py: $_dtune_libs" >&2
  unset _dtune_bundle _dtune_py _dtune_libs
  return 1 2>/dev/null || exit 1
fi
export DTUNE_BUNDLE=$_dtune_bundle
export LD_LIBRARY_PATH="$_dtune_bundle/lib:$_dtune_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$_dtune_bundle/bin:$_dtune_bundle/ompi/bin:$PATH"
# Open MPI and PMIx relocated into the bundle (their compiled-in prefix is /usr).
# (PMIx's directories are absolute in Debian's build, so each is named.)
export OPAL_PREFIX="$_dtune_bundle/ompi" PMIX_PREFIX="$_dtune_bundle/pmix"
export PMIX_LIBDIR="$_dtune_bundle/pmix/lib" PMIX_PKGLIBDIR="$_dtune_bundle/pmix/lib/pmix"
export PMIX_DATADIR="$_dtune_bundle/pmix/share" PMIX_PKGDATADIR="$_dtune_bundle/pmix/share/pmix"
export PMIX_MCA_pmdl_base_verbose=0 OMPI_MCA_mca_base_component_show_load_errors=0
# The test suite's conftest finds the tools and mpirun through these; pytest comes from the bundle.
export DTUNE_BIN_DIR="$_dtune_bundle/bin" DTUNE_MPIRUN="$_dtune_bundle/ompi/bin/mpirun"
export PYTHONPATH="$_dtune_bundle/py${PYTHONPATH:+:$PYTHONPATH}"
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
unset _dtune_bundle _dtune_py _dtune_libs
