// dtune-models: what the model registry builds. `list` prints every model's parameter count and
// FLOPs per sample, by arithmetic from its configuration (models/model_size.h: no weights are
// allocated, so it answers at once; the unit tests check it against the built models); `parity`
// runs one training step (forward, loss, backward) from weights and a batch exported by Python and
// writes logits, loss and every gradient back (and the bytes the forward kept for the backward), so
// a test can compare the C++ model with its PyTorch twin.
#include <torch/autograd.h>
#include <torch/utils.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "core/cli.h"
#include "core/error.h"
#include "core/main_guard.h"
#include "core/torch_cuda.h"
#include "models/model_names.h"
#include "models/model_size.h"
#include "models/registry.h"
#include "models/weights.h"
#include "train/memory_meter.h"

namespace {

using dtune::models::ModelOptions;

void add_model_options(CLI::App* app, ModelOptions& o, std::string& checkpoint) {
  app->add_option("--num-classes", o.num_classes, "ResNet classes")->capture_default_str();
  app->add_option("--image-size", o.image_size, "ResNet input height and width")
      ->capture_default_str();
  app->add_option("--width", o.width, "ResNet base width (torchvision: 64)")->capture_default_str();
  app->add_option("--context", o.context, "transformer context length (0: the model's default)")
      ->capture_default_str();
  app->add_option("--vocab", o.vocab, "transformer vocabulary size (0: the model's default)")
      ->capture_default_str();
  app->add_option("--layers", o.layers, "transformer blocks (0: the model's default)")
      ->capture_default_str();
  app->add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
  app->add_option("--init-from", o.init_from,
                  "start from these weights: a .safetensors file, a sharded checkpoint's "
                  "model.safetensors.index.json, a torch.save file, or a directory holding one");
  app->add_option("--activation-checkpoint", checkpoint,
                  "recompute activations in the backward: none, full (every block) or selective "
                  "(each block's attention half); Llama family")
      ->capture_default_str();
}

// A JSON string's body: quotes, backslashes and control characters escaped (an hf:PATH name).
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// `list --json`: what `dtune model plan` reads (report/dtune_report/layouts.py): per model its
// counts, its transformer shape (zeros for a ResNet) and its units with their tensor-parallel cut.
void print_json(const std::string& name, const dtune::models::ModelSize& size, bool first) {
  const auto& h = size.shape;
  std::printf(
      "%s{\"name\": %s, \"parameters\": %lld, \"training_flops_per_sample\": %.17g, "
      "\"tied_embedding\": %s,\n  \"shape\": {\"layers\": %lld, \"width\": %lld, \"heads\": %lld, "
      "\"kv_heads\": %lld, \"head_dim\": %lld, \"mlp\": %lld, \"vocab\": %lld, \"context\": "
      "%lld},\n  "
      "\"units\": [",
      first ? "" : ",\n", json_string(name).c_str(), static_cast<long long>(size.parameters),
      size.flops.training_flops, size.tied_embedding ? "true" : "false",
      static_cast<long long>(h.layers), static_cast<long long>(h.width),
      static_cast<long long>(h.heads), static_cast<long long>(h.kv_heads),
      static_cast<long long>(h.head_dim), static_cast<long long>(h.mlp),
      static_cast<long long>(h.vocab), static_cast<long long>(h.context));
  for (size_t i = 0; i < size.units.size(); ++i)
    std::printf("%s{\"name\": %s, \"parameters\": %lld, \"tp_split\": %lld}", i ? ", " : "",
                json_string(size.units[i].name).c_str(),
                static_cast<long long>(size.units[i].parameters),
                static_cast<long long>(size.units[i].tp_split));
  std::printf("]}");
}

int list_models(const ModelOptions& o, const std::string& only, bool json) {
  const std::vector<std::string> names =
      only.empty() ? dtune::models::model_names() : std::vector<std::string>{only};
  if (json) {
    std::printf("[");
    for (size_t i = 0; i < names.size(); ++i)
      print_json(names[i], dtune::models::model_size(names[i], o), i == 0);
    std::printf("]\n");
    return 0;
  }
  std::printf("# %-14s %15s %16s %18s  %s\n", "model", "parameters", "fwd GMACs/sample",
              "train GFLOP/sample", "formula (beside it: another convention)");
  // One model (any name the registry builds, hf:PATH included) or every named one.
  for (const auto& name : names) {
    const dtune::models::ModelSize size = dtune::models::model_size(name, o);
    const auto& f = size.flops;
    std::printf("  %-14s %15lld %16.4f %18.4f  %s", name.c_str(),
                static_cast<long long>(size.parameters), f.forward_macs / 1e9,
                f.training_flops / 1e9, f.formula.c_str());
    if (f.alt_formula.empty())
      std::printf("\n");
    else
      std::printf(" (%.4f by %s)\n", f.alt_training_flops / 1e9, f.alt_formula.c_str());
  }
  return 0;
}

int parity(const std::string& name, const ModelOptions& o, const std::string& weights,
           const std::string& batch_path, const std::string& out, bool channels_last) {
  auto model = dtune::models::make_model(name, o);
  if (!weights.empty())
    dtune::models::load_state(*model, dtune::models::read_tensors(weights), {"lm_head.weight"});
  const auto batch = dtune::models::read_tensors(batch_path);
  if (!batch.count("input") || !batch.count("target"))
    throw dtune::UsageError("--batch '" + batch_path + "' needs tensors 'input' and 'target'");
  torch::Tensor input = batch.at("input");
  if (channels_last) {
    dtune::models::to_channels_last(*model);
    input = input.contiguous(at::MemoryFormat::ChannelsLast);
  }
  model->train();
  // What the forward keeps for the backward: the bytes allocated across forward and loss and not
  // freed by the end of them (the saved activations, the logits and the loss).
  torch::Tensor logits, loss;
  using dtune::train::CpuMemoryMeter;
  const int64_t before = CpuMemoryMeter::current_bytes();
  logits = model->forward(input);
  loss = model->loss(logits, batch.at("target"));
  const int64_t activation_bytes = CpuMemoryMeter::current_bytes() - before;
  loss.backward();
  dtune::models::TensorMap result{
      {"logits", logits.detach().contiguous()},
      {"loss", loss.detach()},
      {"activation_bytes", torch::tensor(activation_bytes, torch::kLong)},
      {"recompute_seconds", torch::tensor(model->take_recompute_seconds(), torch::kDouble)}};
  for (const auto& p : model->named_parameters(true))
    result["grad." + p.key()] = p.value().grad().contiguous();
  for (const auto& b : model->named_buffers(true))
    result["buffer." + b.key()] = b.value().contiguous();
  dtune::models::write_tensors(out, result);
  std::printf("loss %.8f -> %s\n", loss.item<double>(), out.c_str());
  return 0;
}

}  // namespace

// Times forward + backward (no optimizer) of `batch` samples, `steps` times after `warmup`, from
// the same weights and batch the Python twin uses; prints one JSON line.
int bench(const std::string& name, const ModelOptions& o, const std::string& weights,
          const std::string& batch_path, int steps, int warmup, bool channels_last) {
  auto model = dtune::models::make_model(name, o);
  if (!weights.empty())
    dtune::models::load_state(*model, dtune::models::read_tensors(weights), {"lm_head.weight"});
  const auto batch = dtune::models::read_tensors(batch_path);
  if (!batch.count("input") || !batch.count("target"))
    throw dtune::UsageError("--batch '" + batch_path + "' needs tensors 'input' and 'target'");
  torch::Tensor input = batch.at("input"), target = batch.at("target");
  if (channels_last) {
    dtune::models::to_channels_last(*model);
    input = input.contiguous(at::MemoryFormat::ChannelsLast);
  }
  model->train();
  auto step = [&] {
    model->zero_grad();
    model->loss(model->forward(input), target).backward();
  };
  for (int i = 0; i < warmup; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"model\": \"%s\", \"samples_per_s\": %.4f, \"steps\": %d, \"batch\": %lld, "
      "\"threads\": %d, \"seconds\": %.4f}\n",
      name.c_str(), static_cast<double>(steps) * static_cast<double>(input.size(0)) / s, steps,
      static_cast<long long>(input.size(0)), torch::get_num_threads(), s);
  return 0;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"dtune-models: the models dtune trains (torchvision ResNets, GPT-2, Llama 3)",
               "dtune-models"};
  app.require_subcommand(1);
  ModelOptions o;
  std::string only, model, weights, batch, out, checkpoint = "none";
  bool channels_last = false, json = false;
  int threads = 0;
  CLI::App* list = app.add_subcommand(
      "list", "Each model's parameters and FLOPs per sample, by arithmetic (nothing is built).");
  add_model_options(list, o, checkpoint);
  list->add_option("--model", only, "only this model");
  list->add_flag("--json", json,
                 "one JSON array: each model's counts, transformer shape and units with the "
                 "elements --tp cuts (what dtune model plan reads)");
  CLI::App* par = app.add_subcommand("parity", "one training step from exported weights and batch");
  add_model_options(par, o, checkpoint);
  par->add_option("--model", model, "model name")->required();
  par->add_option("--weights", weights,
                  "torch.save file of the state_dict (or --init-from; default: own init)");
  par->add_option("--batch", batch, "torch.save file with 'input' and 'target'")->required();
  par->add_option("--out", out, "where to write logits, loss and gradients")->required();
  par->add_flag("--channels-last", channels_last, "run in channels_last memory format");
  int steps = 10, warmup = 3;
  CLI::App* be = app.add_subcommand("bench", "time forward + backward on a saved batch");
  add_model_options(be, o, checkpoint);
  be->add_option("--model", model, "model name")->required();
  be->add_option("--weights", weights, "torch.save file of the state_dict (default: own init)");
  be->add_option("--batch", batch, "torch.save file with 'input' and 'target'")->required();
  be->add_option("--steps", steps, "timed steps")->capture_default_str()->check(dtune::kPositive);
  be->add_option("--warmup", warmup, "untimed steps first")
      ->capture_default_str()
      ->check(dtune::kNonNegative);
  be->add_flag("--channels-last", channels_last, "run in channels_last memory format");
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)")
      ->check(dtune::thread_count());
  try {
    dtune::train::CpuMemoryMeter::install();  // before the first tensor
    const int rc = dtune::parse_cli(app, argc, argv, true);
    if (rc >= 0) return rc;
    if (threads > 0) torch::set_num_threads(threads);
    o.activation_checkpoint = dtune::models::parse_activation_checkpoint(checkpoint);
    if (*list) return list_models(o, only, json);
    if (*be) return bench(model, o, weights, batch, steps, warmup, channels_last);
    return parity(model, o, weights, batch, out, channels_last);
  } catch (const dtune::UsageError& e) {
    std::fprintf(stderr, "dtune-models: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtune-models: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtune::load_torch_cuda_if_driver();  // before any LibTorch call (core/torch_cuda.h)
  dtune::end_process(run(argc, argv));
}
