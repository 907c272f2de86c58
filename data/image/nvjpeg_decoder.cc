// NvjpegDecoder: nvJPEG's single-image API (nvjpegDecode to interleaved RGB on the device), the
// crop box copied back with one cudaMemcpy2DAsync. The library's entry points are looked up with
// dlsym in libnvjpeg.so.13 (the dynamic linker's search path first, then the directory the build
// found it in), typed by the header's own declarations. Built without the header (no CUDA toolkit
// or wheel with nvjpeg.h), every entry point refuses with the reason.
#include "data/image/nvjpeg_decoder.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

#if DTUNE_HAVE_NVJPEG
#include <dlfcn.h>
#include <nvjpeg.h>

#include <mutex>

#include "core/cuda/cuda_error.h"
#endif

namespace dtune::data {

#if DTUNE_HAVE_NVJPEG

namespace {

constexpr const char* kLibrary = "libnvjpeg.so.13";

// The entry points dtune calls, and the process's one library handle (nvJPEG handles are
// thread-safe; decode states are per thread).
struct Api {
  decltype(&nvjpegCreateEx) create_ex = nullptr;
  decltype(&nvjpegCreateSimple) create_simple = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegGetImageInfo) image_info = nullptr;
  decltype(&nvjpegDecode) decode = nullptr;
  std::string device_error;   // why no device can decode ("" when one can)
  std::string library_error;  // why the library cannot be used ("" when it can)
  std::once_flag created;
  nvjpegHandle_t handle = nullptr;
  std::string create_error;
};

// nvjpegStatus_t's names (nvjpeg.h).
std::string status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG:
      return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
  }
  return "nvjpegStatus_t " + std::to_string(static_cast<int>(s));
}

// The statuses that describe the file, not the library: the loader counts and skips such a sample.
bool bad_file(nvjpegStatus_t s) {
  return s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
         s == NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
}

template <class Fn>
bool lookup(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

// Opens the library and looks up its entry points, and asks the runtime for devices, once.
Api& api() {
  static Api a;
  static std::once_flag opened;
  std::call_once(opened, [] {
    int devices = 0;
    const cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess || devices == 0) {
      a.device_error = std::string("no CUDA device (cudaGetDeviceCount: ") +
                       (rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices") + ")";
      cudaGetLastError();
    }
    void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    std::string tried = kLibrary;
#ifdef DTUNE_NVJPEG_LIB_DIR
    if (lib == nullptr) {
      const std::string path = std::string(DTUNE_NVJPEG_LIB_DIR) + "/" + kLibrary;
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      tried += " or " + path;
    }
#endif
    if (lib == nullptr) {
      a.library_error =
          "cannot open " + tried + " (the CUDA toolkit's nvJPEG, or pip's nvidia-nvjpeg)";
      return;
    }
    const bool ok = lookup(lib, "nvjpegCreateEx", a.create_ex) &&
                    lookup(lib, "nvjpegCreateSimple", a.create_simple) &&
                    lookup(lib, "nvjpegJpegStateCreate", a.state_create) &&
                    lookup(lib, "nvjpegJpegStateDestroy", a.state_destroy) &&
                    lookup(lib, "nvjpegGetImageInfo", a.image_info) &&
                    lookup(lib, "nvjpegDecode", a.decode);
    if (!ok) {
      const char* why = dlerror();
      a.library_error = std::string(kLibrary) + " lacks an entry point dtune needs" +
                        (why != nullptr ? std::string(": ") + why : std::string());
    }
  });
  return a;
}

// The library handle, created once: upsampling with interpolation (libjpeg's fancy upsampling is
// a triangle filter too); a library that does not know the flag gets the default handle.
nvjpegHandle_t handle(Api& a) {
  std::call_once(a.created, [&a] {
    nvjpegStatus_t s = a.create_ex(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr,
                                   NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, &a.handle);
    if (s != NVJPEG_STATUS_SUCCESS) s = a.create_simple(&a.handle);
    if (s != NVJPEG_STATUS_SUCCESS) {
      a.handle = nullptr;
      a.create_error = "nvjpegCreate: " + status_name(s);
    }
  });
  if (a.handle == nullptr) throw Error(a.create_error);
  return a.handle;
}

// Coefficient bytes of a component of w x h pixels: 64 two-byte coefficients per 8x8 block.
int64_t component_coef_bytes(int w, int h) {
  return static_cast<int64_t>((w + 7) / 8) * ((h + 7) / 8) * 64 * 2;
}

}  // namespace

std::string nvjpeg_unavailable_reason() {
  const Api& a = api();
  return !a.device_error.empty() ? a.device_error : a.library_error;
}

std::string nvjpeg_library_error() { return api().library_error; }

struct NvjpegDecoder::State {
  int device = 0;
  cudaStream_t stream = nullptr;
  nvjpegJpegState_t jpeg = nullptr;
  unsigned char* image = nullptr;  // the decoded RGB image on the device
  size_t image_bytes = 0;
};

NvjpegDecoder::NvjpegDecoder(int device) {
  const std::string why = nvjpeg_unavailable_reason();
  if (!why.empty()) throw UsageError("--decode nvjpeg cannot run here: " + why);
  Api& a = api();
  auto s = std::make_unique<State>();
  s->device = device;
  DTUNE_CUDA_CHECK(cudaSetDevice(device));
  DTUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  const nvjpegStatus_t st = a.state_create(handle(a), &s->jpeg);
  if (st != NVJPEG_STATUS_SUCCESS) {
    cudaStreamDestroy(s->stream);
    throw Error("nvjpegJpegStateCreate: " + status_name(st));
  }
  state_ = s.release();
}

NvjpegDecoder::~NvjpegDecoder() {
  if (state_ == nullptr) return;
  Api& a = api();
  cudaSetDevice(state_->device);
  if (state_->jpeg != nullptr) a.state_destroy(state_->jpeg);
  if (state_->image != nullptr) cudaFreeAsync(state_->image, state_->stream);
  if (state_->stream != nullptr) {
    cudaStreamSynchronize(state_->stream);
    cudaStreamDestroy(state_->stream);
  }
  delete state_;
}

void NvjpegDecoder::decode_into(CroppedImage& out, const void* data, size_t size,
                                const ChooseBox& choose) {
  if (data == nullptr || size == 0) throw BadImage("JPEG: empty buffer");
  Api& a = api();
  State& s = *state_;
  DTUNE_CUDA_CHECK(cudaSetDevice(s.device));
  const auto* bytes = static_cast<const unsigned char*>(data);
  int components = 0;
  nvjpegChromaSubsampling_t subsampling{};
  int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
  nvjpegStatus_t st =
      a.image_info(handle(a), bytes, size, &components, &subsampling, widths, heights);
  if (st != NVJPEG_STATUS_SUCCESS) throw BadImage("JPEG header (nvJPEG): " + status_name(st));
  const int W = widths[0], H = heights[0];
  if (W <= 0 || H <= 0) throw BadImage("JPEG header: zero-sized image");
  check_image_pixels("JPEG", W, H);  // as the CPU decoders: the same files skipped
  // nvJPEG may fill a truncated scan without an error; the loader's rule is that such a file is
  // bad, as with the CPU decoders (from the file's start: an EXIF thumbnail's EOI would pass).
  if (!has_eoi(bytes, bytes + size)) throw BadImage("JPEG: Premature end of JPEG file");
  const CropBox box = choose(W, H);
  check_crop_box(box, W, H);

  const size_t pitch = static_cast<size_t>(W) * 3;
  if (s.image_bytes < pitch * H) {
    // Grown in this decoder's stream's order (the stream-ordered allocator): cudaFree and
    // cudaMalloc would synchronise the whole device, every rank's compute with it, from a loader
    // thread.
    if (s.image != nullptr) DTUNE_CUDA_CHECK(cudaFreeAsync(s.image, s.stream));
    s.image = nullptr;
    s.image_bytes = 0;
    DTUNE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&s.image), pitch * H, s.stream));
    s.image_bytes = pitch * H;
  }
  nvjpegImage_t image{};
  image.channel[0] = s.image;
  image.pitch[0] = pitch;
  st = a.decode(handle(a), s.jpeg, bytes, size, NVJPEG_OUTPUT_RGBI, &image, s.stream);
  if (st != NVJPEG_STATUS_SUCCESS) {
    // A fresh state for the next image, as the CPU decoders renew theirs after a failure.
    nvjpegJpegState_t fresh = nullptr;
    if (a.state_create(handle(a), &fresh) == NVJPEG_STATUS_SUCCESS) {
      a.state_destroy(s.jpeg);
      s.jpeg = fresh;
    }
    if (bad_file(st)) throw BadImage("JPEG (nvJPEG): " + status_name(st));
    throw Error("nvjpegDecode: " + status_name(st));
  }

  out.reset_keeping_pixels();
  const size_t row = static_cast<size_t>(box.width) * 3;
  if (out.image.pixels.size() < row * box.height) out.image.pixels.resize(row * box.height);
  DTUNE_CUDA_CHECK(cudaMemcpy2DAsync(out.image.pixels.data(), row,
                                     s.image + static_cast<size_t>(box.top) * pitch + box.left * 3,
                                     pitch, row, box.height, cudaMemcpyDeviceToHost, s.stream));
  DTUNE_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  out.image.width = box.width;
  out.image.height = box.height;
  out.box = CropBox{0, 0, box.height, box.width};
  out.full_width = W;
  out.full_height = H;
  for (int c = 0; c < components && c < NVJPEG_MAX_COMPONENT; ++c)
    out.full_coef_bytes += component_coef_bytes(widths[c], heights[c]);
  out.coef_bytes = out.full_coef_bytes;  // nvJPEG decodes the whole image
}

#else  // no nvjpeg.h at build time

std::string nvjpeg_unavailable_reason() {
  return "this build has no nvJPEG (configure found no nvjpeg.h: install the CUDA toolkit's nvJPEG "
         "or pip's nvidia-nvjpeg and rebuild)";
}

std::string nvjpeg_library_error() { return nvjpeg_unavailable_reason(); }

struct NvjpegDecoder::State {};

NvjpegDecoder::NvjpegDecoder(int) {
  throw UsageError("--decode nvjpeg cannot run here: " + nvjpeg_unavailable_reason());
}

NvjpegDecoder::~NvjpegDecoder() = default;

void NvjpegDecoder::decode_into(CroppedImage&, const void*, size_t, const ChooseBox&) {
  throw UsageError("--decode nvjpeg cannot run here: " + nvjpeg_unavailable_reason());
}

#endif

}  // namespace dtune::data
