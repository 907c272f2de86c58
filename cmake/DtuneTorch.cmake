# Finds LibTorch from the project's Python environment (the torch wheel ships LibTorch's headers,
# libraries and CMake config), so nobody passes paths. A cluster's own LibTorch can be used with
# -DTorch_DIR=/path/to/libtorch/share/cmake/Torch, which takes precedence.
# Sets DTUNE_TORCH_FOUND and DTUNE_TORCH_VERSION; targets that need torch link `dtune_torch`.
set(DTUNE_TORCH_FOUND OFF)
set(DTUNE_TORCH_VERSION "")
# Torch_DIR found from one Python is stale once DTUNE_PYTHON changes (a new environment).
if(DTUNE_TORCH_FROM_PYTHON AND NOT DTUNE_TORCH_FROM_PYTHON STREQUAL DTUNE_PYTHON)
  unset(Torch_DIR CACHE)
  unset(Caffe2_DIR CACHE)
endif()
if(NOT Torch_DIR AND DTUNE_PYTHON)
  execute_process(
    COMMAND "${DTUNE_PYTHON}" -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
    OUTPUT_VARIABLE _torch_out ERROR_QUIET RESULT_VARIABLE _torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_torch_rc EQUAL 0)
    string(REPLACE "\n" ";" _torch_lines "${_torch_out}")
    list(GET _torch_lines 0 _torch_prefix)
    list(GET _torch_lines 1 DTUNE_TORCH_VERSION)
    set(Torch_DIR "${_torch_prefix}/Torch" CACHE PATH "LibTorch CMake config directory")
    set(DTUNE_TORCH_FROM_PYTHON "${DTUNE_PYTHON}" CACHE INTERNAL "the Python Torch_DIR came from")
  endif()
elseif(Torch_DIR AND DTUNE_TORCH_FROM_PYTHON)
  # A re-configure: the version is torch.__version__ ("2.11.0+cu130") as on the first one, not
  # Torch's CMake config's ("2.11.0"), so that a results file's libtorch_version does not depend on
  # whether the build was re-configured since.
  execute_process(
    COMMAND "${DTUNE_PYTHON}" -c "import torch; print(torch.__version__)"
    OUTPUT_VARIABLE DTUNE_TORCH_VERSION ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(Torch_DIR AND DTUNE_ENABLE_TORCH)
  # Torch's config re-finds CUDA and, without an architecture list, compiles and runs a probe to
  # detect the local GPUs: that fails on build machines without one (and with CMake 3.25, which
  # does not know nvcc 13's C++20 flag). Giving the list skips the probe: A100 (8.0), H100/H200 (9.0).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
  endif()
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(DTUNE_TORCH_FOUND ON)
    # dtune_torch: what our targets link instead of Torch's `torch`. LibTorch's CUDA half is loaded
    # at run time where a CUDA driver is (core/torch_cuda.h), not linked: `torch` forces
    # libtorch_cuda.so (and libtorch.so, which needs it) into every binary with --no-as-needed,
    # and loading it costs each process about 0.12 s of CPU. Its dependencies (c10_cuda, the CUDA
    # runtime) stay, and so do its compile definitions; a call into libtorch_cuda itself would fail
    # to link, which keeps the boundary honest.
    if(TARGET torch_cuda_library AND TARGET torch_cuda)
      set_property(TARGET torch_cuda_library PROPERTY INTERFACE_LINK_LIBRARIES
                   "$<TARGET_PROPERTY:torch_cuda,INTERFACE_LINK_LIBRARIES>")
    endif()
    add_library(dtune_torch INTERFACE)
    target_include_directories(dtune_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
    target_compile_options(dtune_torch INTERFACE ${TORCH_CXX_FLAGS})
    target_link_libraries(dtune_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_LINK_LIBRARIES>)
    if(NOT DTUNE_TORCH_VERSION)
      set(DTUNE_TORCH_VERSION "${Torch_VERSION}")
    endif()
  endif()
endif()
