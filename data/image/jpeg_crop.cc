// JpegCropDecoder over libjpeg-turbo's libjpeg API. Errors leave through setjmp/longjmp (libjpeg's
// error_exit must not return); the frame that calls setjmp holds no object with a destructor that
// the jump would skip. Warnings follow JpegCodec: a warning is a bad image unless it is stray bytes
// between segments.
#include "data/image/jpeg_crop.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dtune::data {

namespace {

struct Errors {
  jpeg_error_mgr pub{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  char warning[JMSG_LENGTH_MAX] = {};  // the first warning that makes the image bad
};

void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<Errors*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// libjpeg reports a truncated or corrupt entropy-coded stream only as a warning (level -1) and
// fills the rest with grey; every such warning but stray bytes between segments makes the image
// bad, as in JpegCodec.
void on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  auto* e = reinterpret_cast<Errors*>(c->err);
  if (e->warning[0] != '\0') return;
  char text[JMSG_LENGTH_MAX];
  c->err->format_message(c, text);
  if (std::strstr(text, "extraneous bytes before marker") == nullptr)
    std::memcpy(e->warning, text, sizeof text);
}

// Runs libjpeg calls with error_exit's jump landing here: false when they failed. The calls run
// in `fn`'s frame, which the jump leaves; `fn` holds no object with a destructor across them.
template <class Fn>
[[gnu::noinline]] bool guarded(Errors& e, Fn&& fn) {
  if (setjmp(e.jump) != 0) return false;
  fn();
  return true;
}

int64_t blocks_bytes(int64_t blocks) {
  return blocks * DCTSIZE2 * static_cast<int64_t>(sizeof(JCOEF));
}

}  // namespace

// A decompressor with dtune's error handlers, created and destroyed with its holder (heap-held:
// cinfo.err points into it).
struct JpegCropDecoder::State {
  State() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    jpeg_create_decompress(&cinfo);
  }
  ~State() { jpeg_destroy_decompress(&cinfo); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  jpeg_decompress_struct cinfo{};
  Errors err;
};

bool has_eoi(const unsigned char* from, const unsigned char* end) {
  for (const unsigned char* p = end - 1; p > from; --p)
    if (*p == 0xD9 && p[-1] == 0xFF) return true;
  return false;
}

int fast_scale_denom(int box_w, int box_h, int out_w, int out_h) {
  if (out_w <= 0 || out_h <= 0) return 1;
  for (int d : {8, 4, 2})
    if (box_w >= d * out_w && box_h >= d * out_h) return d;
  return 1;
}

JpegCropDecoder::JpegCropDecoder() : state_(new State) {}

JpegCropDecoder::~JpegCropDecoder() { delete state_; }

void JpegCropDecoder::renew() {
  State* fresh = new State;  // first: a failed allocation leaves the old one in place
  delete state_;
  state_ = fresh;
  ++renewals_;
}

CroppedImage JpegCropDecoder::decode(const void* data, size_t size, const ChooseBox& choose,
                                     int out_w, int out_h, bool fast, int margin) {
  CroppedImage out;
  decode_into(out, data, size, choose, out_w, out_h, fast, margin);
  return out;
}

void JpegCropDecoder::decode_into(CroppedImage& out, const void* data, size_t size,
                                  const ChooseBox& choose, int out_w, int out_h, bool fast,
                                  int margin) {
  if (data == nullptr || size == 0) throw BadImage("JPEG: empty buffer");
  jpeg_decompress_struct& cinfo = state_->cinfo;
  Errors& err = state_->err;
  err.message[0] = err.warning[0] = '\0';
  out.reset_keeping_pixels();
  // Only libjpeg's own calls run guarded: the caller's `choose` (which may throw) runs between.
  CropBox box;
  const auto* bytes = static_cast<const unsigned char*>(data);
  const auto fail = [&](const char* what) {
    const std::string why = what + std::string(err.message[0] != '\0' ? err.message : err.warning);
    renew();
    throw BadImage(why);
  };
  if (!guarded(err,
               [&] {
                 jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(size));
                 jpeg_read_header(&cinfo, TRUE);
               }) ||
      err.warning[0] != '\0')
    fail("JPEG header: ");
  out.full_width = static_cast<int>(cinfo.image_width);
  out.full_height = static_cast<int>(cinfo.image_height);
  if (out.full_width <= 0 || out.full_height <= 0) {
    renew();
    throw BadImage("JPEG header: zero-sized image");
  }
  // The whole image's size, as the whole-image decoder checks it, so both skip the same files.
  try {
    check_image_pixels("JPEG", out.full_width, out.full_height);
  } catch (const BadImage&) {
    renew();
    throw;
  }
  // The rest of the data after the first scan's header, for the end-of-image check.
  const unsigned char* scan = cinfo.src->next_input_byte;
  if (!has_eoi(scan, bytes + size)) {
    renew();
    throw BadImage("JPEG: Premature end of JPEG file");
  }
  // The caller's choice, and its check, run between libjpeg's calls: leave the decompressor idle.
  try {
    box = choose(out.full_width, out.full_height);
    check_crop_box(box, out.full_width, out.full_height);
  } catch (...) {
    jpeg_abort_decompress(&cinfo);
    throw;
  }
  const int d = fast ? fast_scale_denom(box.width, box.height, out_w, out_h) : 1;
  out.scale_denom = d;
  // The box in the (possibly scaled) output's pixels: libjpeg scales a dimension to ceil(n / d).
  const int sl = box.left / d, st = box.top / d;
  const int sr = (box.left + box.width + d - 1) / d, sb = (box.top + box.height + d - 1) / d;

  JDIMENSION xoff = 0, xw = 0;
  int y0 = 0, y1 = 0;
  const bool ok = guarded(err, [&] {
    cinfo.out_color_space = JCS_EXT_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = static_cast<unsigned int>(d);
    jpeg_start_decompress(&cinfo);
    const int W = static_cast<int>(cinfo.output_width), H = static_cast<int>(cinfo.output_height);
    const int left = std::max(0, sl - margin), right = std::min(W, std::min(sr, W) + margin);
    y0 = std::max(0, st - margin);
    y1 = std::min(H, std::min(sb, H) + margin);
    xoff = static_cast<JDIMENSION>(left);
    xw = static_cast<JDIMENSION>(right - left);
    if (xw < static_cast<JDIMENSION>(W)) jpeg_crop_scanline(&cinfo, &xoff, &xw);
    const int w = static_cast<int>(cinfo.output_width);
    out.image.width = w;
    out.image.height = y1 - y0;
    const size_t bytes = static_cast<size_t>(w) * (y1 - y0) * 3;
    if (out.image.pixels.size() < bytes) out.image.pixels.resize(bytes);
    if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
    // Up to an iMCU row's worth of rows per call (libjpeg returns at most what one row group
    // holds; fewer calls through its layers than one row at a time).
    JSAMPROW rows[16];
    while (static_cast<int>(cinfo.output_scanline) < y1) {
      const int at = static_cast<int>(cinfo.output_scanline);
      const int n = std::min(16, y1 - at);
      for (int i = 0; i < n; ++i)
        rows[i] = out.image.pixels.data() + static_cast<size_t>(at - y0 + i) * w * 3;
      jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(n));
    }
    // The coefficients that went through the inverse DCT: per component, the blocks of the
    // decoded columns (iMCU-aligned) and of the iMCU rows up to the last row read (skipped iMCU
    // rows above are entropy-decoded only).
    const int max_h = cinfo.max_h_samp_factor, max_v = cinfo.max_v_samp_factor;
    const int imcu_rows_px = max_v * static_cast<int>(cinfo.min_DCT_scaled_size);
    for (int c = 0; c < cinfo.num_components; ++c) {
      const jpeg_component_info& comp = cinfo.comp_info[c];
      const int64_t bw = comp.width_in_blocks, bh = comp.height_in_blocks;
      out.full_coef_bytes += blocks_bytes(bw * bh);
      // Decoded pixel columns [xoff, xoff + xw) and iMCU rows [y0 / iMCU, ceil(y1 / iMCU)) of the
      // scaled output, mapped to this component's blocks.
      const int64_t px_per_block_x =
          static_cast<int64_t>(cinfo.min_DCT_scaled_size) * max_h / comp.h_samp_factor;
      const int64_t c0 = xoff / px_per_block_x;
      const int64_t c1 = std::min<int64_t>(bw, (xoff + xw + px_per_block_x - 1) / px_per_block_x);
      const int64_t r0 = static_cast<int64_t>(y0 / imcu_rows_px) * comp.v_samp_factor;
      const int64_t r1 = std::min<int64_t>(
          bh, static_cast<int64_t>((y1 + imcu_rows_px - 1) / imcu_rows_px) * comp.v_samp_factor);
      out.coef_bytes += blocks_bytes(std::max<int64_t>(0, c1 - c0) * std::max<int64_t>(0, r1 - r0));
    }
    jpeg_abort_decompress(&cinfo);
  });
  if (!ok || err.warning[0] != '\0') fail("JPEG: ");
  out.box.left = sl - static_cast<int>(xoff);
  out.box.top = st - y0;
  out.box.width = std::min(sr, static_cast<int>(xoff + xw)) - sl;
  out.box.height = std::min(sb, y1) - st;
}

}  // namespace dtune::data
