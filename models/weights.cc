// torch.save-compatible tensor files and loading by name.
#include "models/weights.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace dtune::models {

TensorMap read_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read tensor file '" + path + "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  torch::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw UsageError("'" + path + "' is not a torch.save file of tensors: " +
                     std::string(e.what()).substr(0, 200));
  }
  if (!v.isGenericDict()) throw UsageError("'" + path + "' holds no dict of name -> tensor");
  TensorMap out;
  for (const auto& kv : v.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor())
      throw UsageError("'" + path + "': every entry must map a name to a tensor");
    out[kv.key().toStringRef()] = kv.value().toTensor();
  }
  return out;
}

void write_tensors(const std::string& path, const TensorMap& tensors) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [k, v] : tensors) dict.insert(k, v);
  const std::vector<char> bytes = torch::pickle_save(torch::IValue(dict));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error("cannot write tensor file '" + path + "'");
}

void load_state(torch::nn::Module& m, const TensorMap& tensors,
                const std::set<std::string>& ignored) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  auto copy = [&](const std::string& name, torch::Tensor& dst) {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw UsageError("weights: no tensor named '" + name + "'");
    if (it->second.sizes() != dst.sizes())
      throw UsageError("weights: '" + name + "' has shape " + c10::str(it->second.sizes()) +
                       ", the model expects " + c10::str(dst.sizes()));
    if (dst.is_floating_point() && !it->second.is_floating_point())
      throw UsageError("weights: '" + name + "' is " +
                       std::string(c10::toString(it->second.scalar_type())) +
                       ", the model's parameter is floating point");
    dst.copy_(it->second);
    used.insert(name);
  };
  for (auto& p : m.named_parameters(/*recurse=*/true)) copy(p.key(), p.value());
  for (auto& b : m.named_buffers(/*recurse=*/true)) copy(b.key(), b.value());
  for (const auto& [k, v] : tensors)
    if (!used.count(k) && !ignored.count(k))
      throw UsageError("weights: '" + k + "' matches no parameter or buffer");
}

}  // namespace dtune::models
