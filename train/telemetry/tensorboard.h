// TensorBoard event files written by dtune itself (no Python in the training process): a TFRecord
// stream of Event protobufs, each record `uint64 length, uint32 masked_crc32c(length), bytes,
// uint32 masked_crc32c(bytes)` with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8; the first
// event carries file_version "brain.Event:2", the others a Summary with one simple_value.
// Sources: TensorFlow's TFRecord format as tensorboard writes it (tensorflow/tensorboard:
// tensorboard/summary/writer/record_writer.py for the framing, masked_crc32c in
// tensorboard/compat/tensorflow_stub/pywrap_tensorflow.py for the mask) and the field numbers of
// tensorboard/compat/proto/event.proto and summary.proto. The protobuf encoding is done by hand:
// four fields.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace dtune {

uint32_t crc32c(const void* data, size_t n);  // Castagnoli polynomial, as TFRecord uses
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates DIR (and parents) and DIR/events.out.tfevents.<time>.<host>.<pid>; throws UsageError
  // naming `flag` when DIR cannot be written.
  TensorBoardWriter(const std::string& dir, const std::string& flag);
  void scalar(const std::string& tag, int64_t step, float value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace dtune
