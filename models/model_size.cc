// Parameters and FLOPs by arithmetic (see model_size.h). Each count follows the layers the
// constructors in gpt.cc and resnet.cc build, in the same order.
#include "models/model_size.h"

#include "core/error.h"
#include "models/family.h"
#include "models/gpt_config.h"
#include "models/llama_config.h"
#include "models/resnet_config.h"

namespace dtune::models {
namespace {

// A conv (no bias, as resnet.cc builds them) at input (h, w): its weights, and its MACs, updating
// h and w to its output size (PyTorch's formula, floor mode, dilation 1).
struct Conv {
  int64_t in, out, k, stride, pad;
};
// Parameters of the units so far: a new unit is what was added since.
int64_t counted(const std::vector<ParamUnit>& units) {
  int64_t n = 0;
  for (const auto& u : units) n += u.parameters;
  return n;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

double add_conv(const Conv& c, int64_t& h, int64_t& w, int64_t& params) {
  params += c.in * c.out * c.k * c.k;
  h = out_size(h, c.k, c.stride, c.pad);
  w = out_size(w, c.k, c.stride, c.pad);
  return static_cast<double>(h * w) * static_cast<double>(c.out * c.in * c.k * c.k);
}

}  // namespace

ModelSize resnet_size(const ResNetConfig& cfg) {
  ModelSize s;
  int64_t& n = s.parameters;
  int64_t h = cfg.image_size, w = cfg.image_size;
  const int64_t base = cfg.width;
  const bool basic = cfg.block == BlockKind::kBasic;
  const int64_t expansion = basic ? 1 : 4;
  std::vector<int64_t>& pe = s.param_elems;             // in the order resnet.cc registers them
  double macs = add_conv({3, base, 7, 2, 3}, h, w, n);  // conv1
  n += 2 * base;                                        // bn1: weight and bias
  pe = {3 * base * 49, base, base};
  s.units.push_back({"stem", n});
  h = out_size(h, 3, 2, 1);  // max pool
  w = out_size(w, 3, 2, 1);
  int64_t inplanes = base;
  for (size_t stage = 0; stage < 4; ++stage) {
    const int64_t planes = base << stage;
    for (int64_t b = 0; b < cfg.layers[stage]; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1, outplanes = planes * expansion;
      const bool down = stride != 1 || inplanes != outplanes;
      if (down) {  // downsample: 1x1 conv + BN, at the input size
        int64_t dh = h, dw = w;
        macs += add_conv({inplanes, outplanes, 1, stride, 0}, dh, dw, n);
        n += 2 * outplanes;
      }
      if (basic) {
        macs += add_conv({inplanes, planes, 3, stride, 1}, h, w, n);
        macs += add_conv({planes, planes, 3, 1, 1}, h, w, n);
        n += 4 * planes;
        pe.insert(pe.end(),
                  {inplanes * planes * 9, planes, planes, planes * planes * 9, planes, planes});
      } else {
        macs += add_conv({inplanes, planes, 1, 1, 0}, h, w, n);
        macs += add_conv({planes, planes, 3, stride, 1}, h, w, n);
        macs += add_conv({planes, outplanes, 1, 1, 0}, h, w, n);
        n += 4 * planes + 2 * outplanes;
        pe.insert(pe.end(), {inplanes * planes, planes, planes, planes * planes * 9, planes, planes,
                             planes * outplanes, outplanes, outplanes});
      }
      // The block registers its shortcut after its own layers.
      if (down) pe.insert(pe.end(), {inplanes * outplanes, outplanes, outplanes});
      inplanes = outplanes;
    }
    s.units.push_back({"layer" + std::to_string(stage + 1), n - counted(s.units)});
  }
  n += inplanes * cfg.num_classes + cfg.num_classes;  // fc
  pe.insert(pe.end(), {inplanes * cfg.num_classes, cfg.num_classes});
  s.units.push_back({"fc", n - counted(s.units)});
  macs += static_cast<double>(inplanes * cfg.num_classes);
  s.flops.forward_macs = macs;
  s.flops.training_flops = 3.0 * 2.0 * macs;
  s.flops.formula = "3 x 2 x forward MACs (forward + backward ~ 3 forwards; 1 MAC = 2 FLOPs)";
  return s;
}

// The conventions of Gpt::flops() (gpt.cc explains them), from the configuration.
ModelSize gpt_size(const GptConfig& cfg) {
  if (cfg.width % cfg.heads != 0) throw UsageError("GPT width must divide by the number of heads");
  const int64_t L = cfg.layers, C = cfg.width, T = cfg.context, V = cfg.vocab;
  ModelSize s;
  // wte V·C (the head is wte), wpe T·C; per block ln_1 2C, c_attn 3C²+3C, attn.c_proj C²+C,
  // ln_2 2C, c_fc 4C²+4C, mlp.c_proj 4C²+C (12C²+13C); ln_f 2C.
  s.parameters = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  // --tp: wte by vocabulary; c_attn and c_fc (weights and biases) by columns, the projections'
  // weights by rows (their biases, the LayerNorms and wpe whole).
  s.units.push_back({"embed", V * C + T * C, V * C});
  for (int64_t i = 0; i < L; ++i)
    s.units.push_back({"h." + std::to_string(i), 12 * C * C + 13 * C, 12 * C * C + 7 * C});
  s.units.push_back({"ln_f", 2 * C, 0});
  s.shape = {L, C, cfg.heads, cfg.heads, C / cfg.heads, 4 * C, V, T};
  s.param_elems = {V * C, T * C};
  for (int64_t i = 0; i < L; ++i)  // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj
    s.param_elems.insert(s.param_elems.end(),
                         {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C});
  s.param_elems.insert(s.param_elems.end(), {C, C});
  const double Ld = static_cast<double>(L), Cd = static_cast<double>(C);
  const double Td = static_cast<double>(T), N = static_cast<double>(s.parameters);
  const double matmul_macs = static_cast<double>(V * C) + Ld * 12 * Cd * Cd;
  FlopCount& f = s.flops;
  f.tokens = Td;
  f.forward_macs = (matmul_macs + Ld * Td * Cd) * Td;
  f.training_flops = (6 * N + 6 * Ld * Cd * Td) * Td;
  f.formula = "6N+6LCT (llm.c)";
  f.alt_training_flops = (6 * (N - Td * Cd) + 12 * Ld * Cd * Td) * Td;
  f.alt_formula = "6N+12LCT (PaLM, nanoGPT)";
  s.tied_embedding = true;
  return s;
}

// The conventions of Llama::flops() (llama.cc explains them), from the configuration; parameters
// in LlamaForCausalLM's named_parameters() order.
ModelSize llama_size(const LlamaConfig& cfg) {
  const int64_t C = cfg.width, V = cfg.vocab, I = cfg.intermediate;
  const int64_t HD = cfg.heads * cfg.head_dim, KD = cfg.kv_heads * cfg.head_dim;
  const int64_t ab = cfg.attention_bias ? 1 : 0, mb = cfg.mlp_bias ? 1 : 0;
  ModelSize s;
  s.tied_embedding = cfg.tied_embedding;
  // Per layer: q_proj, k_proj, v_proj, o_proj (their biases with attention_bias), gate_proj,
  // up_proj, down_proj (with mlp_bias), input_layernorm, post_attention_layernorm.
  std::vector<int64_t> layer = {HD * C};
  if (ab) layer.push_back(HD);
  layer.push_back(KD * C);
  if (ab) layer.push_back(KD);
  layer.push_back(KD * C);
  if (ab) layer.push_back(KD);
  layer.push_back(C * HD);
  if (ab) layer.push_back(C);
  for (int k = 0; k < 2; ++k) {  // gate_proj, up_proj
    layer.push_back(I * C);
    if (mb) layer.push_back(I);
  }
  layer.push_back(C * I);
  if (mb) layer.push_back(C);
  layer.insert(layer.end(), {C, C});
  int64_t per_layer = 0;
  for (int64_t e : layer) per_layer += e;
  // --tp: q/k/v and gate/up by columns (with their biases), o and down by rows (their biases
  // whole), the embedding and an untied head by vocabulary; the norms whole.
  const int64_t layer_split = (2 * HD + 2 * KD) * C + 3 * I * C + ab * (HD + 2 * KD) + mb * 2 * I;
  s.param_elems = {V * C};
  s.units.push_back({"embed", V * C, V * C});
  for (int64_t i = 0; i < cfg.layers; ++i) {
    s.param_elems.insert(s.param_elems.end(), layer.begin(), layer.end());
    s.units.push_back({"layers." + std::to_string(i), per_layer, layer_split});
  }
  s.param_elems.push_back(C);                               // model.norm
  if (!cfg.tied_embedding) s.param_elems.push_back(V * C);  // lm_head
  const int64_t head = cfg.tied_embedding ? 0 : V * C;
  s.units.push_back({"head", C + head, head});
  s.shape = {cfg.layers, C, cfg.heads, cfg.kv_heads, cfg.head_dim, I, V, cfg.context};
  s.parameters = counted(s.units);
  const double L = static_cast<double>(cfg.layers), T = static_cast<double>(cfg.context);
  const double Cd = static_cast<double>(C), Vd = static_cast<double>(V);
  const double HDd = static_cast<double>(HD), KDd = static_cast<double>(KD);
  const double Id = static_cast<double>(I), N = static_cast<double>(s.parameters);
  const double matmul_macs = Vd * Cd + L * (Cd * (2 * HDd + 2 * KDd) + 3 * Cd * Id);
  const double n_matmul = N - Vd * Cd + (cfg.tied_embedding ? Vd * Cd : 0.0);
  FlopCount& f = s.flops;
  f.tokens = T;
  f.forward_macs = (matmul_macs + L * HDd * T) * T;
  f.training_flops = (6 * n_matmul + 12 * L * HDd * T) * T;
  f.formula = "6N'+12LHDT (torchtitan; N' without the token embedding, with the head)";
  f.alt_training_flops = (6 * N + 12 * L * HDd * T) * T;
  f.alt_formula = "6N+12LHDT (PaLM)";
  return s;
}

ModelSize model_size(const std::string& name, const ModelOptions& o) {
  return model_family(name).size(name, o);
}

}  // namespace dtune::models
