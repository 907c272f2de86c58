// Parameters and FLOPs by arithmetic (see model_size.h). Each count follows the layers the
// constructors in gpt.cc and resnet.cc build, in the same order.
#include "models/model_size.h"

#include "core/error.h"
#include "models/family.h"
#include "models/gpt_config.h"
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
  s.units.push_back({"embed", V * C + T * C});
  for (int64_t i = 0; i < L; ++i)
    s.units.push_back({"h." + std::to_string(i), 12 * C * C + 13 * C});
  s.units.push_back({"ln_f", 2 * C});
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
  return s;
}

ModelSize model_size(const std::string& name, const ModelOptions& o) {
  return model_family(name).size(name, o);
}

}  // namespace dtune::models
