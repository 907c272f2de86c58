// The model registry: parameter counts against torchvision's model documentation (ResNets) and
// llm.c (GPT-2 124M), FLOPs against torchvision's published GMACs, forward shapes of every
// model small enough to build here, the arithmetic of model_size.h against the built models (and
// the large GPTs against their published counts), its FSDP units against the built modules,
// channels_last against contiguous, and deterministic initialisation for a seed; the pipeline's
// pieces compose to the model, and the zero-bubble split of the
// backward (weight_grad_store.h) gives the gradients of one whole backward.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/activation.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/family.h"
#include "models/gpt.h"
#include "models/model_size.h"
#include "models/pieces.h"
#include "models/registry.h"
#include "models/weight_grad_store.h"

namespace dtune::models {
namespace {

TEST(Models, ResNetParameterCountsMatchTorchvision) {
  const ModelOptions o;  // 1000 classes, 224x224, width 64
  EXPECT_EQ(parameter_count(*make_model("resnet18", o)), 11689512);
  EXPECT_EQ(parameter_count(*make_model("resnet34", o)), 21797672);
  EXPECT_EQ(parameter_count(*make_model("resnet50", o)), 25557032);
  EXPECT_EQ(parameter_count(*make_model("resnet101", o)), 44549160);
}

TEST(Models, Gpt2D12ParameterCountWithPaddedVocabulary) {
  // C = 768, L = 12, T = 1024, V = 50,304 (50,257 padded to a multiple of 128):
  //   wte V·C = 38,633,472; wpe T·C = 786,432 (the head is wte, counted once)
  //   per block: ln_1 2C = 1,536; c_attn C·3C + 3C = 1,771,776; attn.c_proj C·C + C = 590,592;
  //              ln_2 1,536; c_fc C·4C + 4C = 2,362,368; mlp.c_proj 4C·C + C = 2,360,064
  //              = 7,087,872, × 12 = 85,054,464
  //   ln_f 2C = 1,536
  //   total 38,633,472 + 786,432 + 85,054,464 + 1,536 = 124,475,904 (llm.c prints the same)
  EXPECT_EQ(parameter_count(*make_model("gpt2-d12", ModelOptions{})), 124475904);
}

TEST(Models, ForwardMacsMatchPublishedFigures) {
  // torchvision: ResNet-18 1.814 GMACs, ResNet-50 4.089 GMACs at 224x224.
  EXPECT_NEAR(make_model("resnet18", {})->flops().forward_macs / 1e9, 1.814, 0.0005);
  EXPECT_NEAR(make_model("resnet50", {})->flops().forward_macs / 1e9, 4.089, 0.0005);
  const FlopCount f = make_model("resnet18", {})->flops();
  EXPECT_DOUBLE_EQ(f.training_flops, 6 * f.forward_macs);
  EXPECT_FALSE(f.formula.empty());
}

TEST(Models, GptTrainingFlopsFollowLlmcFormula) {
  ModelOptions o;
  const auto m = make_model("gpt2-tiny", o);
  const FlopCount f = m->flops();
  const double N = static_cast<double>(parameter_count(*m)), L = 2, C = 128, T = 128;
  EXPECT_DOUBLE_EQ(f.training_flops, (6 * N + 6 * L * C * T) * T);
  EXPECT_DOUBLE_EQ(f.tokens, T);
  // The counted forward MACs against this formula, exactly: tests/unit/train/test_mfu.cc.
}

// Models a unit test can build in about a second each; the GPT-2 d24, d36 and d48 (355M to 1.56B
// parameters, 6 GB for d48) are covered by the arithmetic (ModelSize tests below), which the built
// small models check.
const std::vector<std::string> kSmallModels = {"resnet18",  "resnet34",  "resnet50", "resnet101",
                                               "resnet152", "gpt2-tiny", "gpt2-d6",  "gpt2-d12"};

TEST(Models, EveryRegisteredModelForwardShape) {
  torch::NoGradGuard no_grad;
  ModelOptions o;
  o.num_classes = 10;
  o.image_size = 32;
  o.width = 16;  // the ResNets' shapes do not depend on it; 16x fewer weights to initialise
  o.context = 16;
  o.vocab = 64;
  for (const auto& name : kSmallModels) {
    auto m = make_model(name, o);
    m->eval();
    auto [x, y] = m->synthetic_batch(2, torch::kCPU, 7);
    const torch::Tensor out = m->forward(x);
    if (name.rfind("resnet", 0) == 0) {
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10})) << name;
    } else {
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 16, 64})) << name;
    }
    EXPECT_TRUE(torch::isfinite(m->loss(out, y)).item<bool>()) << name;
  }
}

// The arithmetic (model_size.h) equals what the built model counts, exactly, for every model small
// enough to build here, at the defaults and at other options (sizes, classes, context, vocabulary).
TEST(ModelSize, EqualsTheBuiltModels) {
  ModelOptions other;
  other.num_classes = 10;
  other.image_size = 64;
  other.width = 16;
  other.context = 64;
  other.vocab = 256;
  for (const ModelOptions& o : {ModelOptions{}, other}) {
    for (const auto& name : kSmallModels) {
      // At the defaults, ResNet-101 and -152 add only more of ResNet-50's blocks: built small.
      if (o.width == 64 && (name == "resnet101" || name == "resnet152")) continue;
      const auto m = make_model(name, o);
      const ModelSize s = model_size(name, o);
      const FlopCount f = m->flops();
      EXPECT_EQ(s.parameters, parameter_count(*m)) << name;
      // Parameter by parameter, in the built model's order (size-capped units are cut from these).
      std::vector<int64_t> built;
      for (const auto& p : m->parameters()) built.push_back(p.numel());
      EXPECT_EQ(s.param_elems, built) << name;
      EXPECT_DOUBLE_EQ(s.flops.forward_macs, f.forward_macs) << name;
      EXPECT_DOUBLE_EQ(s.flops.training_flops, f.training_flops) << name;
      EXPECT_DOUBLE_EQ(s.flops.tokens, f.tokens) << name;
      EXPECT_EQ(s.flops.formula, f.formula) << name;
      EXPECT_EQ(s.flops.alt_formula, f.alt_formula) << name;
      if (f.alt_formula.empty())
        EXPECT_TRUE(std::isnan(s.flops.alt_training_flops)) << name;
      else
        EXPECT_DOUBLE_EQ(s.flops.alt_training_flops, f.alt_training_flops) << name;
    }
  }
}

// The FSDP unit a built model's parameter belongs to, from its name (model_size.h ParamUnit):
// transformer.wte.weight -> embed, transformer.h.3.attn.c_attn.weight -> h.3, layer2.0.conv1.weight
// -> layer2, conv1.weight -> stem.
std::string unit_of(const std::string& param) {
  const auto part = [&](size_t i) {
    size_t begin = 0;
    for (size_t k = 0; k < i; ++k) begin = param.find('.', begin) + 1;
    return param.substr(begin, param.find('.', begin) - begin);
  };
  if (part(0) == "transformer") {
    const std::string module = part(1);
    if (module == "wte" || module == "wpe") return "embed";
    return module == "h" ? "h." + part(2) : module;
  }
  const std::string module = part(0);
  return module == "conv1" || module == "bn1" ? "stem" : module;
}

// model_size's units are the built model's modules: each unit's count is the parameters whose
// names fall in it, and the units come in forward order.
TEST(ModelSize, UnitsAreTheBuiltModulesParameters) {
  ModelOptions o;
  o.num_classes = 10;
  o.image_size = 64;
  o.width = 16;
  o.context = 64;
  o.vocab = 256;
  for (const auto& name : kSmallModels) {
    const auto m = make_model(name, o);
    std::map<std::string, int64_t> built;
    for (const auto& p : m->named_parameters(/*recurse=*/true))
      built[unit_of(p.key())] += p->numel();
    const ModelSize s = model_size(name, o);
    std::map<std::string, int64_t> counted;
    for (const ParamUnit& u : s.units) counted[u.name] += u.parameters;
    EXPECT_EQ(counted, built) << name;
    EXPECT_EQ(s.units.front().name, name.rfind("gpt2-", 0) == 0 ? "embed" : "stem") << name;
    EXPECT_EQ(s.units.back().name, name.rfind("gpt2-", 0) == 0 ? "ln_f" : "fc") << name;
  }
}

// The models too large to build in a unit test, against their published sizes: with GPT-2's own
// vocabulary of 50,257, d24/d36/d48 are GPT-2 medium, large and XL, whose parameter counts are
// 354,823,168, 774,030,080 and 1,557,611,200 (Hugging Face's gpt2-medium/-large/-xl
// num_parameters(), the tied head once). dtune pads the vocabulary to 50,304: 47 x C more.
TEST(ModelSize, LargeGptsMatchPublishedCounts) {
  ModelOptions o;
  o.vocab = 50257;
  EXPECT_EQ(model_size("gpt2-d24", o).parameters, 354823168);
  EXPECT_EQ(model_size("gpt2-d36", o).parameters, 774030080);
  EXPECT_EQ(model_size("gpt2-d48", o).parameters, 1557611200);
  EXPECT_EQ(model_size("gpt2-d48", {}).parameters, 1557611200 + 47 * 1600);
  EXPECT_EQ(model_size("gpt2-d12", o).parameters, 124439808);  // GPT-2 small
  EXPECT_THROW(model_size("gpt2-d7", {}), UsageError);
  EXPECT_THROW(model_size("resnet20", {}), UsageError);
}

TEST(Models, ChannelsLastGivesTheSameOutput) {
  torch::NoGradGuard no_grad;
  ModelOptions o;
  o.num_classes = 10;
  o.image_size = 64;
  for (const char* name : {"resnet18", "resnet50"}) {
    auto m = make_model(name, o);
    m->eval();
    const torch::Tensor x = m->synthetic_batch(2, torch::kCPU, 3).first;
    const torch::Tensor ref = m->forward(x);
    to_channels_last(*m);
    const torch::Tensor got = m->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(torch::allclose(got, ref, 1e-4, 1e-5))
        << name << " max diff " << (got - ref).abs().max().item<float>();
  }
}

TEST(Models, InitialisationIsDeterministicForASeed) {
  ModelOptions o;
  o.num_classes = 10;
  o.seed = 42;
  auto a = make_model("resnet18", o), b = make_model("resnet18", o);
  o.seed = 43;
  auto c = make_model("resnet18", o);
  const auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  EXPECT_FALSE(torch::equal(pa[0], pc[0]));
  // torchvision's conv init: kaiming normal, fan_out, relu: std = sqrt(2 / (64·7·7)).
  EXPECT_NEAR(pa[0].std().item<double>(), std::sqrt(2.0 / (64 * 49)), 0.002);
}

TEST(Models, UnknownNamesAndBadOptionsAreUsageErrors) {
  EXPECT_THROW(make_model("resnet19", {}), UsageError);
  EXPECT_THROW(make_model("vgg16", {}), UsageError);
  ModelOptions o;
  o.image_size = 16;
  EXPECT_THROW(make_model("resnet18", o), UsageError);
  ModelOptions g;
  g.context = 8;
  auto m = make_model("gpt2-tiny", g);
  EXPECT_THROW(m->forward(torch::zeros({1, 9}, torch::kLong)), UsageError);
}

// One entry per family: the names `dtune-models list` prints are the families' in order, each name
// finds its own family (and builds a model of that name, cut into pieces by its family's cut), and
// no other name finds one.
TEST(ModelFamilies, EveryNameBelongsToOneFamilyAndBuildsItself) {
  std::vector<std::string> names;
  for (const auto& f : model_families())
    names.insert(names.end(), f.models.begin(), f.models.end());
  EXPECT_EQ(names, model_names());
  EXPECT_EQ(names.size(), 17u);  // 5 ResNets, 6 GPT-2s, 6 Llamas
  for (const auto& f : model_families())
    for (const auto& m : f.models) EXPECT_EQ(model_family(m).name, f.name) << m;
  EXPECT_TRUE(model_family("gpt2-d48").sequence);
  EXPECT_FALSE(model_family("resnet152").sequence);
  for (const char* bad : {"resnet19", "gpt2-d7", "gpt2-", "resnet", "llama3-8b", ""})
    EXPECT_THROW(model_family(bad), UsageError) << bad;
  ModelOptions tiny;
  tiny.image_size = 32;
  tiny.width = 8;
  for (const std::string name : {"resnet18", "resnet50", "gpt2-tiny"}) {
    auto m = make_model(name, tiny);
    EXPECT_EQ(m->name(), name);
    const auto pieces = model_pieces(*m);
    // GPT: embedding, 2 blocks, head; ResNet: stem, one piece per residual block, pool and fc.
    const size_t want = name == "gpt2-tiny" ? 4 : name == "resnet18" ? 2 + 8 : 2 + 16;
    EXPECT_EQ(pieces.size(), want) << name;
    EXPECT_EQ(model_size(name, tiny).parameters, model_family(name).size(name, tiny).parameters);
  }
}

// The pipeline's pieces of each transformer family, composed, are the model's forward, and they
// name every parameter once (the tied embedding twice: embed and head).
TEST(Models, TransformerPiecesComposeToTheForwardAndNameEveryParameter) {
  ModelOptions o;
  o.context = 16;
  o.vocab = 64;
  for (const std::string name : {"gpt2-tiny", "llama3-tiny"}) {
    auto m = make_model(name, o);
    torch::Tensor tokens = torch::randint(o.vocab, {2, o.context}, torch::kLong);
    torch::NoGradGuard no_grad;
    const torch::Tensor whole = m->forward(tokens);
    const auto pieces = model_pieces(*m);
    torch::Tensor x = tokens;
    std::map<std::string, int> named;
    for (const auto& p : pieces) {
      x = p.forward(x);
      for (const auto& n : p.parameters) ++named[n];
    }
    EXPECT_TRUE(torch::allclose(x, whole, 1e-5, 1e-6)) << name;
    for (const auto& p : m->named_parameters())
      EXPECT_GE(named[p.key()], 1) << name << ": " << p.key() << " in no piece";
    EXPECT_EQ(named.size(), m->named_parameters().size()) << name;
    size_t blocks = 0;
    for (const auto& p : pieces) blocks += p.kind == PieceKind::kBlock;
    EXPECT_EQ(blocks, 2u) << name;  // both tiny models have 2 blocks
  }
}

// Zero bubble: a forward recorded into a WeightGradStore leaves the linear layers' weights and
// biases without gradient after autograd's backward (B), every other parameter with its gradient;
// compute() (W) then gives each the gradient one whole backward gives, fp32 and under bf16
// autocast (the products in bf16 there, as autograd's).
TEST(Models, DeferredWeightGradientsEqualOneWholeBackward) {
  ModelOptions o;
  o.context = 16;
  o.vocab = 64;
  for (const std::string name : {"gpt2-tiny", "llama3-tiny"})
    for (bool bf16 : {false, true}) {
      auto m = make_model(name, o);
      torch::Tensor tokens = torch::randint(o.vocab, {2, o.context}, torch::kLong);
      torch::Tensor target = torch::randint(o.vocab, {2, o.context}, torch::kLong);
      auto run = [&](WeightGradStore* store) {
        for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
        std::optional<WeightGradStore::Recording> rec;
        if (store) rec.emplace(*store, 7);
        torch::Tensor loss;
        {
          if (bf16) {
            at::autocast::set_autocast_enabled(at::kCPU, true);
            at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
          }
          loss = m->loss(m->forward(tokens), target);
          if (bf16) {
            at::autocast::set_autocast_enabled(at::kCPU, false);
            at::autocast::clear_cache();
          }
        }
        rec.reset();
        loss.backward();
      };
      run(nullptr);
      std::map<std::string, torch::Tensor> whole;
      for (const auto& p : m->named_parameters()) whole[p.key()] = p.value().grad().clone();
      WeightGradStore store;
      run(&store);
      size_t deferred = 0;
      for (const auto& p : m->named_parameters()) deferred += !p.value().grad().defined();
      EXPECT_GT(deferred, 0u) << name;
      EXPECT_FALSE(store.empty());
      EXPECT_EQ(store.compute(6), 0u);  // another micro-batch's W: nothing
      EXPECT_GT(store.compute(7), 0u);
      EXPECT_TRUE(store.empty());
      const double tol = bf16 ? 2e-2 : 1e-5;
      for (const auto& p : m->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << name << ": " << p.key();
        const torch::Tensor& g = whole[p.key()];
        const double scale = g.abs().max().item<double>() + 1e-12;
        EXPECT_LE((p.value().grad() - g).abs().max().item<double>() / scale, tol)
            << name << (bf16 ? " bf16 " : " fp32 ") << p.key();
      }
    }
}

}  // namespace
}  // namespace dtune::models
