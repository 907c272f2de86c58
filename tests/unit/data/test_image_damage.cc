// One bad JPEG never costs a good one: for each kind of damage, a codec that just refused the
// damaged buffer decodes the next good image byte for byte as a fresh codec does, both after a
// failed decode() and after a failed dimensions() (TurboJPEG 2.1 kept the state of a header it
// could not finish, and every later header read on that handle failed: issue 31). The same for
// the region-of-interest decoder (jpeg_crop.h): every damaged copy is refused whatever the box
// (a box in the top rows does not let a file truncated below it through), and the next good image
// decodes as on a fresh decoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/image/jpeg.h"
#include "data/image/jpeg_crop.h"
#include "data/image/synthetic.h"

namespace dtune::data {
namespace {

// Offset of the first marker FF <code> in a JPEG, or npos.
size_t find_marker(const std::string& jpeg, unsigned char code) {
  for (size_t i = 2; i + 1 < jpeg.size(); ++i)
    if (static_cast<unsigned char>(jpeg[i]) == 0xFF &&
        static_cast<unsigned char>(jpeg[i + 1]) == code)
      return i;
  return std::string::npos;
}

struct Damage {
  std::string name;
  std::string bytes;
};

// The kinds of damage of tests/data/test_damaged_inputs.py, made from one good JPEG.
std::vector<Damage> damaged_copies(const std::string& good) {
  const size_t dht = find_marker(good, 0xC4), sos = find_marker(good, 0xDA);
  EXPECT_NE(dht, std::string::npos);
  EXPECT_NE(sos, std::string::npos);
  std::vector<Damage> out;
  out.push_back({"truncated inside the header", good.substr(0, dht + 8)});
  out.push_back({"truncated inside the scan", good.substr(0, sos + (good.size() - sos) / 2)});
  std::string bogus = good;  // the 16 code-length counts of the first Huffman table: all 0xFF
  for (size_t i = dht + 5; i < dht + 21; ++i) bogus[i] = static_cast<char>(0xFF);
  out.push_back({"bogus Huffman table", bogus});
  out.push_back({"zero bytes", ""});
  std::mt19937 rng(7);
  std::string noise(good.size(), '\0');
  for (auto& c : noise) c = static_cast<char>(rng() & 0xFF);
  out.push_back({"random bytes", noise});
  out.push_back({"random bytes after a JPEG signature", "\xFF\xD8\xFF" + noise});
  out.push_back({"a PNG", std::string("\x89PNG\r\n\x1a\n", 8) + noise});
  out.push_back({"the header alone", good.substr(0, sos)});
  return out;
}

class DamagedJpeg : public ::testing::Test {
 protected:
  void SetUp() override {
    JpegCodec fresh;
    for (int i = 0; i < 3; ++i) {
      const int w = 64 + 16 * i, h = 48 - 8 * i;
      good_.push_back(fresh.encode(synthetic_image(w, h, i, 3, 100 + i), 90));
      JpegCodec once;
      expected_.push_back(once.decode(good_.back().data(), good_.back().size()).pixels);
    }
  }
  std::vector<std::string> good_;
  std::vector<std::vector<uint8_t>> expected_;  // each good image on a fresh codec, (H, W, 3)
};

TEST_F(DamagedJpeg, NextGoodImageDecodesAsOnAFreshCodecAfterEachKind) {
  for (const Damage& d : damaged_copies(good_[0])) {
    SCOPED_TRACE(d.name);
    JpegCodec codec;
    EXPECT_THROW(codec.decode(d.bytes.data(), d.bytes.size()), BadImage);
    for (size_t i = 0; i < good_.size(); ++i) {
      EXPECT_EQ(codec.decode(good_[i].data(), good_[i].size()).pixels, expected_[i]) << i;
    }
  }
}

TEST_F(DamagedJpeg, HeaderReadAfterAFailedHeaderReadSucceeds) {
  for (const Damage& d : damaged_copies(good_[1])) {
    SCOPED_TRACE(d.name);
    JpegCodec codec;
    try {
      codec.dimensions(d.bytes.data(), d.bytes.size());
    } catch (const BadImage&) {
    }
    EXPECT_EQ(codec.dimensions(good_[1].data(), good_[1].size()), std::make_pair(80, 40));
    EXPECT_EQ(codec.decode(good_[1].data(), good_[1].size()).pixels, expected_[1]);
  }
}

// Every good image after every damaged one, in one codec, as one loader thread sees a shard.
TEST_F(DamagedJpeg, InterleavedStreamLosesNoGoodImage) {
  JpegCodec codec;
  int bad = 0, good = 0;
  for (int round = 0; round < 2; ++round)
    for (const Damage& d : damaged_copies(good_[round])) {
      EXPECT_THROW(codec.decode(d.bytes.data(), d.bytes.size()), BadImage) << d.name;
      ++bad;
      for (size_t i = 0; i < good_.size(); ++i) {
        EXPECT_EQ(codec.decode(good_[i].data(), good_[i].size()).pixels, expected_[i]);
        ++good;
      }
    }
  EXPECT_EQ(good, 3 * bad);
  EXPECT_GE(codec.renewals(), bad - 2);  // every failure but the empty buffers renewed the handle
}

// The region-of-interest path: every kind of damage refused, for a box in the top-left corner (the
// rows below it are never decoded) and for the whole image, and the decoder left as new.
TEST_F(DamagedJpeg, RegionDecoderRefusesEveryKindAndStaysUsable) {
  const auto whole = [](int w, int h) { return CropBox{0, 0, h, w}; };
  const auto corner = [](int w, int h) { return CropBox{0, 0, std::min(h, 8), std::min(w, 8)}; };
  JpegCropDecoder roi;
  int bad = 0;
  for (int round = 0; round < 2; ++round)
    for (const Damage& d : damaged_copies(good_[round])) {
      for (const ChooseBox& choose : {ChooseBox(corner), ChooseBox(whole)}) {
        EXPECT_THROW(roi.decode(d.bytes.data(), d.bytes.size(), choose), BadImage) << d.name;
        ++bad;
        for (size_t i = 0; i < good_.size(); ++i) {
          const CroppedImage c = roi.decode(good_[i].data(), good_[i].size(), whole);
          EXPECT_EQ(c.image.pixels, expected_[i]) << d.name << ", then good image " << i;
        }
      }
    }
  EXPECT_GE(roi.renewals(), bad - 4);  // every failure but the empty buffers renewed it
}

// Random damage (bit flips, bytes overwritten, cuts) to good JPEGs of every size here, each through
// the region decoder with a random box: it either decodes or throws BadImage, never anything else,
// and the next good image still decodes as on a fresh decoder. Seeded: the same 300 cases every
// run (run under AddressSanitizer when the decoder changes).
TEST_F(DamagedJpeg, RandomDamageEndsInBadImageOrPixelsAndNeverPoisonsTheRegionDecoder) {
  std::mt19937 rng(2026);
  JpegCropDecoder roi;
  const auto whole = [](int w, int h) { return CropBox{0, 0, h, w}; };
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good_[static_cast<size_t>(i) % good_.size()];
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {
      for (int f = 0; f < 4; ++f)
        bytes[rng() % bytes.size()] ^= static_cast<char>(1u << (rng() % 8));
    } else if (kind == 1) {
      const size_t at = rng() % bytes.size();
      for (size_t k = at; k < std::min(bytes.size(), at + 16); ++k)
        bytes[k] = static_cast<char>(rng());
    } else {
      bytes.resize(rng() % bytes.size());
    }
    const auto box = [&rng](int w, int h) {
      CropBox b;
      b.width = 1 + static_cast<int>(rng() % static_cast<unsigned>(w));
      b.height = 1 + static_cast<int>(rng() % static_cast<unsigned>(h));
      b.left = static_cast<int>(rng() % static_cast<unsigned>(w - b.width + 1));
      b.top = static_cast<int>(rng() % static_cast<unsigned>(h - b.height + 1));
      return b;
    };
    try {
      const CroppedImage c = roi.decode(bytes.data(), bytes.size(), box);
      EXPECT_EQ(c.image.pixels.size(), static_cast<size_t>(c.image.width) * c.image.height * 3);
    } catch (const BadImage&) {
      ++refused;
    }
    const size_t g = static_cast<size_t>(i + 1) % good_.size();
    EXPECT_EQ(roi.decode(good_[g].data(), good_[g].size(), whole).image.pixels, expected_[g]) << i;
  }
  EXPECT_GT(refused, 100);  // the cuts alone (a third) lose their end-of-image marker
}

// The one difference between the two CPU decoders (doc/data.md, jpeg_crop.h): a file whose data
// is cut short below the crop box, its end-of-image marker intact, is refused by the whole-image
// decode and delivered by the region decoder, whose box holds exactly the clean image's pixels
// (the rows it decodes are intact); a box that reaches the damage is refused by both.
TEST(DamagedBelowTheBox, RegionDecoderDeliversTheIntactBoxTheWholeDecodeRefuses) {
  JpegCodec codec;
  const std::string good = codec.encode(synthetic_image(64, 256, 1, 3, 5), 90);
  const size_t sos = find_marker(good, 0xDA);
  const std::string cut = good.substr(0, sos + (good.size() - sos) * 6 / 10) + "\xFF\xD9";
  EXPECT_THROW(codec.decode(cut.data(), cut.size()), BadImage);
  const std::vector<uint8_t> clean = codec.decode(good.data(), good.size()).pixels;
  JpegCropDecoder roi;
  const auto top = [](int w, int) { return CropBox{0, 0, 16, w}; };
  const CroppedImage c = roi.decode(cut.data(), cut.size(), top);
  ASSERT_EQ(c.image.width, 64);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 64 * 3; ++x)
      ASSERT_EQ(c.image.pixels[static_cast<size_t>(c.box.top + y) * 64 * 3 + x],
                clean[static_cast<size_t>(y) * 64 * 3 + x])
          << y << "," << x;
  const auto whole = [](int w, int h) { return CropBox{0, 0, h, w}; };
  EXPECT_THROW(roi.decode(cut.data(), cut.size(), whole), BadImage);
}

}  // namespace
}  // namespace dtune::data
