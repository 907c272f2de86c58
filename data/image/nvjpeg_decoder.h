// nvJPEG decoding on a CUDA GPU behind the loader's decoder interface (dtune's --decode nvjpeg):
// the whole image is decoded on the GPU (nvJPEG chooses CPU or GPU Huffman decoding itself) to
// interleaved RGB, and only the crop box is copied back, so the same crop, resize, flip and
// normalise run on the CPU afterwards as for --decode roi and full. nvJPEG's inverse DCT and chroma
// upsampling are its own (upsampling with interpolation is asked for, as libjpeg's fancy
// upsampling does), so the pixels are close to libjpeg's, not equal: tests/gpu/test_nvjpeg.cc
// states by how much on a GPU.
//
// libnvjpeg is opened at run time (dlopen of libnvjpeg.so.13: the CUDA toolkit's, or the
// nvidia-nvjpeg wheel's in the project's Python environment), so binaries run where it is absent;
// the header comes from either at build time. Without the header, a library, a driver or a device,
// constructing a decoder throws UsageError saying which and what to use instead. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image/jpeg_crop.h"

namespace dtune::data {

// Why --decode nvjpeg cannot run here ("" when it can): no nvjpeg.h at build time, no
// libnvjpeg.so.13 to open, no CUDA device. Opens the library (once) to find out.
std::string nvjpeg_unavailable_reason();
// Only the library's part of it: "" when libnvjpeg.so.13 opened and every entry point dtune calls
// resolved (needs no device: tests check it everywhere).
std::string nvjpeg_library_error();

// Thread-compatible, one per thread (its own nvJPEG state, CUDA stream and buffers; the library
// handle is shared by the process).
class NvjpegDecoder {
 public:
  // Decodes on CUDA device `device`. Throws UsageError when nvjpeg_unavailable_reason() is not
  // empty, and dtune::Error when the device is there but nvJPEG or CUDA fails to set up.
  explicit NvjpegDecoder(int device = 0);
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // Reads the header, asks `choose` for the box, decodes the image on the GPU and copies the
  // box's pixels into `out` (out.image is the box, out.box covers it; the pixel buffer is reused
  // as JpegCropDecoder::decode_into reuses it). coef_bytes counts the whole image: nvJPEG decodes
  // all of it. Throws BadImage for a JPEG nvJPEG refuses (bad, unsupported or incomplete
  // bitstream), dtune::Error for a CUDA or nvJPEG failure.
  void decode_into(CroppedImage& out, const void* data, size_t size, const ChooseBox& choose);

 private:
  struct State;
  State* state_ = nullptr;
};

}  // namespace dtune::data
