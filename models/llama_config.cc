// Llama configurations by name and from a Hugging Face config.json (llama_config.h).
#include "models/llama_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace dtune::models {
namespace {

using nlohmann::json;

constexpr int64_t kLlama3Vocab = 128256;
constexpr int64_t kTrainContext = 8192;  // torchtitan's Llama 3 seq_len; also the hf: cap

// The published shapes (REFERENCE.md, the checkpoints' config.json): hidden, layers, heads, KV
// heads, intermediate, tied, rope scaling factor.
LlamaConfig published(const std::string& name, int64_t width, int64_t layers, int64_t heads,
                      int64_t intermediate, bool tied, double rope_factor) {
  LlamaConfig c;
  c.name = name;
  c.width = width;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = 8;
  c.head_dim = width / heads;
  c.intermediate = intermediate;
  c.vocab = kLlama3Vocab;
  c.context = kTrainContext;
  c.tied_embedding = tied;
  c.rope_scaling.factor = rope_factor;
  return c;
}

void check_shape(const LlamaConfig& c, const std::string& where) {
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) throw UsageError(where + ": " + field + " must be positive");
  };
  positive(c.layers, "num_hidden_layers");
  positive(c.width, "hidden_size");
  positive(c.heads, "num_attention_heads");
  positive(c.kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.intermediate, "intermediate_size");
  positive(c.vocab, "vocab_size");
  positive(c.context, "the context (max_position_embeddings, --context)");
  if (c.heads % c.kv_heads != 0)
    throw UsageError(where + ": num_key_value_heads " + std::to_string(c.kv_heads) +
                     " does not divide num_attention_heads " + std::to_string(c.heads));
  if (c.head_dim % 2 != 0)
    throw UsageError(where + ": head_dim " + std::to_string(c.head_dim) +
                     " is odd (rotary embeddings rotate halves)");
  if (!(c.rms_eps > 0)) throw UsageError(where + ": rms_norm_eps must be positive");
  if (!(c.rope_theta > 0)) throw UsageError(where + ": rope_theta must be positive");
  const RopeScaling& r = c.rope_scaling;
  if (r.factor != 0 && (!(r.factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
                        !(r.low_freq_factor > 0) || r.original_max_position <= 0))
    throw UsageError(where +
                     ": rope scaling needs factor > 0, high_freq_factor > low_freq_factor > 0 "
                     "and original_max_position_embeddings > 0");
}

// Fields of LlamaConfig that change nothing dtune computes in training (token ids, the saved
// dtype, generation and output switches, bookkeeping); any other unknown field is refused.
const std::set<std::string> kInert = {"_name_or_path",
                                      "architectures",
                                      "bos_token_id",
                                      "eos_token_id",
                                      "pad_token_id",
                                      "initializer_range",
                                      "torch_dtype",
                                      "dtype",
                                      "transformers_version",
                                      "use_cache",
                                      "output_attentions",
                                      "output_hidden_states",
                                      "return_dict",
                                      "tokenizer_class",
                                      "id2label",
                                      "label2id",
                                      "model_type",
                                      "max_position_embeddings",
                                      "attention_dropout",
                                      "pretraining_tp",
                                      "rope_parameters",
                                      "rope_scaling",
                                      "rope_theta",
                                      "hidden_act",
                                      "attention_bias",
                                      "mlp_bias",
                                      "head_dim",
                                      "tie_word_embeddings",
                                      "hidden_size",
                                      "intermediate_size",
                                      "num_attention_heads",
                                      "num_hidden_layers",
                                      "num_key_value_heads",
                                      "rms_norm_eps",
                                      "vocab_size"};

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw UsageError(where + ": field '" + key + "' is " +
                     (j.contains(key) ? "not a " + std::string(std::is_same_v<T, bool> ? "boolean"
                                                               : std::is_integral_v<T> ? "integer"
                                                                                       : "number")
                                      : std::string("missing")));
  }
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (4): default or llama3 only.
void read_rope(const json& j, LlamaConfig& c, const std::string& where) {
  json rope = j.contains("rope_parameters") && !j["rope_parameters"].is_null()
                  ? j["rope_parameters"]
                  : (j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? j["rope_scaling"]
                                                                                : json::object());
  if (!rope.is_object()) throw UsageError(where + ": rope_parameters must be an object");
  if (rope.contains("rope_theta")) c.rope_theta = field<double>(rope, "rope_theta", where);
  if (j.contains("rope_theta")) c.rope_theta = field<double>(j, "rope_theta", where);
  std::string type = "default";
  if (rope.contains("rope_type"))
    type = field<std::string>(rope, "rope_type", where);
  else if (rope.contains("type"))
    type = field<std::string>(rope, "type", where);
  if (type == "default") return;
  if (type != "llama3")
    throw UsageError(where + ": rope_type '" + type +
                     "' is not supported (dtune builds 'default' and Llama 3.1's 'llama3')");
  c.rope_scaling.factor = field<double>(rope, "factor", where);
  c.rope_scaling.low_freq_factor = field<double>(rope, "low_freq_factor", where);
  c.rope_scaling.high_freq_factor = field<double>(rope, "high_freq_factor", where);
  c.rope_scaling.original_max_position =
      field<int64_t>(rope, "original_max_position_embeddings", where);
}

}  // namespace

bool is_hf_model(const std::string& name) { return name.rfind("hf:", 0) == 0; }

LlamaConfig hf_llama_config(const std::string& path_in) {
  namespace fs = std::filesystem;
  fs::path path = path_in;
  if (fs::is_directory(path)) path /= "config.json";
  const std::string where = path.string();
  std::ifstream in(path);
  if (!in) throw UsageError("--model hf:" + path_in + ": cannot read " + where);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError(where + ": not JSON (" + std::string(e.what()).substr(0, 120) + ")");
  }
  if (!j.is_object()) throw UsageError(where + ": not a JSON object");
  for (const auto& [k, v] : j.items())
    if (!kInert.count(k))
      throw UsageError(where + ": unknown field '" + k +
                       "' (dtune builds LlamaForCausalLM; a field it does not know may change the "
                       "model, so it is refused)");
  if (j.contains("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string() || a[0] != "LlamaForCausalLM")
      throw UsageError(where + ": architectures " + a.dump() +
                       " is not [\"LlamaForCausalLM\"], the one dtune builds");
  }
  if (j.contains("model_type") && j["model_type"] != "llama")
    throw UsageError(where + ": model_type " + j["model_type"].dump() + " is not \"llama\"");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw UsageError(where + ": hidden_act " + j["hidden_act"].dump() +
                     " is not \"silu\" (the SwiGLU MLP)");
  if (j.contains("attention_dropout") && field<double>(j, "attention_dropout", where) != 0)
    throw UsageError(where + ": attention_dropout must be 0 (dtune trains without dropout)");
  if (j.contains("pretraining_tp") && field<int64_t>(j, "pretraining_tp", where) != 1)
    throw UsageError(where + ": pretraining_tp must be 1");
  LlamaConfig c;
  c.name = "hf:" + path_in;
  c.width = field<int64_t>(j, "hidden_size", where);
  c.layers = field<int64_t>(j, "num_hidden_layers", where);
  c.heads = field<int64_t>(j, "num_attention_heads", where);
  c.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                   ? field<int64_t>(j, "num_key_value_heads", where)
                   : c.heads;
  c.intermediate = field<int64_t>(j, "intermediate_size", where);
  c.vocab = field<int64_t>(j, "vocab_size", where);
  if (c.heads <= 0) throw UsageError(where + ": num_attention_heads must be positive");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = field<int64_t>(j, "head_dim", where);
  } else {
    if (c.width % c.heads != 0)
      throw UsageError(where + ": num_attention_heads " + std::to_string(c.heads) +
                       " does not divide hidden_size " + std::to_string(c.width));
    c.head_dim = c.width / c.heads;
  }
  const int64_t max_pos = j.contains("max_position_embeddings")
                              ? field<int64_t>(j, "max_position_embeddings", where)
                              : 2048;  // LlamaConfig's default
  c.context = std::min(max_pos, kTrainContext);
  if (j.contains("tie_word_embeddings"))
    c.tied_embedding = field<bool>(j, "tie_word_embeddings", where);
  if (j.contains("attention_bias")) c.attention_bias = field<bool>(j, "attention_bias", where);
  if (j.contains("mlp_bias")) c.mlp_bias = field<bool>(j, "mlp_bias", where);
  c.rms_eps = j.contains("rms_norm_eps") ? field<double>(j, "rms_norm_eps", where) : 1e-6;
  c.rope_theta = 10000;  // LlamaConfig's default, unless the file says otherwise
  read_rope(j, c, where);
  check_shape(c, where);
  return c;
}

LlamaConfig llama_config(const std::string& name, const ModelOptions& o) {
  LlamaConfig c;
  if (name == "llama3-tiny") {
    c.rope_scaling.factor = 8;
    c.rope_scaling.original_max_position = 64;
  } else if (name == "llama3.2-1b") {
    c = published(name, 2048, 16, 32, 8192, true, 32);
  } else if (name == "llama3.2-3b") {
    c = published(name, 3072, 28, 24, 8192, true, 32);
  } else if (name == "llama3.1-8b") {
    c = published(name, 4096, 32, 32, 14336, false, 8);
  } else if (name == "llama3.1-70b") {
    c = published(name, 8192, 80, 64, 28672, false, 8);
  } else if (name == "llama3.1-405b") {
    c = published(name, 16384, 126, 128, 53248, false, 8);
  } else if (is_hf_model(name)) {
    c = hf_llama_config(name.substr(3));
  } else {
    throw UsageError("--model " + name +
                     ": not a Llama model (llama3-tiny, llama3.2-1b, -3b, llama3.1-8b, -70b, "
                     "-405b, hf:PATH)");
  }
  if (o.context < 0 || o.vocab < 0 || o.layers < 0)
    throw UsageError("--context, --vocab and --layers must be positive");
  if (o.context > 0) c.context = o.context;
  if (o.vocab > 0) c.vocab = o.vocab;
  if (o.layers > 0) c.layers = o.layers;
  check_shape(c, "--model " + name);
  return c;
}

}  // namespace dtune::models
