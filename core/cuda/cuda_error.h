// Check macros for the CUDA runtime, NCCL and cuBLAS(Lt), the twins of DTUNE_MPI_CHECK in
// core/error.h: a failing call throws dtune::Error carrying the expression, file:line, rank, host
// and the library's own message. The _WARN twins only print to stderr, for destructors (never
// throw). Header-only and free of nccl.h and cublasLt.h, so CUDA-only builds can include it: the
// NCCL and cuBLAS macros name their library's functions only where they expand.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "core/error.h"

namespace dtune::detail {

[[noreturn]] inline void raise_cuda_error(const char* expr, cudaError_t rc, const char* file,
                                          int line) {
  raise_library_error(
      "CUDA", expr, std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc), file, line);
}

// `last_error` is ncclGetLastError's detail (may be empty or null); it often names the cause
// (a socket, a duplicate GPU) where the result code only says "internal error".
inline std::string nccl_message(const char* error_string, const char* last_error) {
  std::string m = error_string ? error_string : "unknown NCCL error";
  if (last_error && *last_error) m += std::string(" (") + last_error + ")";
  return m;
}

[[noreturn]] inline void raise_nccl_error(const char* expr, const char* error_string,
                                          const char* last_error, const char* file, int line) {
  raise_library_error("NCCL", expr, nccl_message(error_string, last_error), file, line);
}

// Never throws: used from destructors, possibly while an exception is already unwinding.
inline void warn_library_error(const char* library, const char* expr, const char* message,
                               const char* file, int line) noexcept {
  std::string who = "rank ?";
  try {
    who = process_identity();
  } catch (...) {
  }
  std::fprintf(stderr, "dtune: warning: %s error: %s [%s at %s:%d, %s]\n", library, message, expr,
               file, line, who.c_str());
}

}  // namespace dtune::detail

// cudaError_t; the message is cudaGetErrorName: cudaGetErrorString.
#define DTUNE_CUDA_CHECK(expr)                                                      \
  do {                                                                              \
    const cudaError_t dtune_cuda_rc_ = (expr);                                      \
    if (dtune_cuda_rc_ != cudaSuccess)                                              \
      ::dtune::detail::raise_cuda_error(#expr, dtune_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

#define DTUNE_CUDA_WARN(expr)                                                                \
  do {                                                                                       \
    const cudaError_t dtune_cuda_rc_ = (expr);                                               \
    if (dtune_cuda_rc_ != cudaSuccess)                                                       \
      ::dtune::detail::warn_library_error("CUDA", #expr, cudaGetErrorString(dtune_cuda_rc_), \
                                          __FILE__, __LINE__);                               \
  } while (0)

// ncclResult_t; anything but ncclSuccess throws, ncclInProgress included: calls on a nonblocking
// communicator go through NcclComm::settle (DTUNE_NCCL_SETTLE in core/cuda/nccl_comm.h) instead.
#define DTUNE_NCCL_CHECK(expr)                                                          \
  do {                                                                                  \
    const ncclResult_t dtune_nccl_rc_ = (expr);                                         \
    if (dtune_nccl_rc_ != ncclSuccess)                                                  \
      ::dtune::detail::raise_nccl_error(#expr, ncclGetErrorString(dtune_nccl_rc_),      \
                                        ncclGetLastError(nullptr), __FILE__, __LINE__); \
  } while (0)

#define DTUNE_NCCL_WARN(expr)                                               \
  do {                                                                      \
    const ncclResult_t dtune_nccl_rc_ = (expr);                             \
    if (dtune_nccl_rc_ != ncclSuccess)                                      \
      ::dtune::detail::warn_library_error(                                  \
          "NCCL", #expr,                                                    \
          ::dtune::detail::nccl_message(ncclGetErrorString(dtune_nccl_rc_), \
                                        ncclGetLastError(nullptr))          \
              .c_str(),                                                     \
          __FILE__, __LINE__);                                              \
  } while (0)

// cublasStatus_t (cuBLAS and cuBLASLt); the message is cublasLtGetStatusName: ...String. Like the
// NCCL macros, they name cuBLASLt functions only where they expand, in files including cublasLt.h.
#define DTUNE_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                            \
    const cublasStatus_t dtune_cublas_rc_ = (expr);                                               \
    if (dtune_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::dtune::detail::raise_library_error("cuBLAS", #expr,                                       \
                                           std::string(cublasLtGetStatusName(dtune_cublas_rc_)) + \
                                               ": " + cublasLtGetStatusString(dtune_cublas_rc_),  \
                                           __FILE__, __LINE__);                                   \
  } while (0)

#define DTUNE_CUBLAS_WARN(expr)                                                            \
  do {                                                                                     \
    const cublasStatus_t dtune_cublas_rc_ = (expr);                                        \
    if (dtune_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::dtune::detail::warn_library_error(                                                 \
          "cuBLAS", #expr, cublasLtGetStatusString(dtune_cublas_rc_), __FILE__, __LINE__); \
  } while (0)
