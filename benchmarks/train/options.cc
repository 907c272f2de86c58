// CLI11 definition of dtune-train's flags.
#include "benchmarks/train/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/build_info.h"
#include "core/cli.h"
#include "core/error.h"
#include "core/results_file.h"
#include "models/family.h"
#include "models/shard_unit.h"
#include "train/mesh.h"

namespace dtune::train {

namespace {

// --accum-steps / --micro-batches: more micro-steps than this per optimizer step is a typo (each
// keeps its activations under gpipe, and 10^8 of them would run for days before one step ends).
constexpr long long kMaxMicroSteps = 4096;

// --profile-steps START:COUNT, within the run's warm-up + measured steps.
void parse_profile_steps(const std::string& text, Options& o) {
  const std::string usage =
      "--profile-steps '" + text + "': give START:COUNT, e.g. 2:3 (steps 2, 3 and 4)";
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw UsageError(usage);
  try {
    size_t p1 = 0, p2 = 0;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    o.profile_first = std::stoi(a, &p1);
    o.profile_steps = std::stoi(b, &p2);
    if (p1 != a.size() || p2 != b.size()) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw UsageError(usage);
  }
  if (o.profile_first < 0 || o.profile_steps < 1)
    throw UsageError(usage + " (START >= 0, COUNT >= 1)");
  const int total = o.warmup_steps + o.steps;
  if (o.profile_first + o.profile_steps > total)
    throw UsageError("--profile-steps " + text + " goes past the last step: the run has " +
                     std::to_string(total) + " steps (--warmup-steps " +
                     std::to_string(o.warmup_steps) + " + --steps " + std::to_string(o.steps) +
                     "), numbered from 0");
}

// --pipeline-stages and its companions, after parsing: the rules between them and the flags a
// pipeline does not support (yet).
void parse_pipeline(const std::string& schedule, const std::string& partition,
                    const std::string& pieces, Options& o) {
  auto& pp = o.pipeline;
  pp.schedule = enum_value(kScheduleNames, schedule);
  pp.partition = enum_value(kPartitionNames, partition);
  pp.pieces = enum_value(kStagePiecesNames, pieces);
  const int P = pp.stages, M = pp.micro_batches, V = pp.virtual_stages;
  if (pp.schedule != Schedule::kInterleaved && V > 1)
    throw UsageError("--virtual-stages " + std::to_string(V) +
                     " needs --schedule interleaved (gpipe and 1f1b hold one chunk per stage)");
  if (P == 1) return;
  const std::string p = "--pipeline-stages " + std::to_string(P);
  if (pp.schedule == Schedule::kInterleaved) {
    if (V < 2)
      throw UsageError(
          "--schedule interleaved needs --virtual-stages 2 or more (chunks per stage)");
    if (M < P || M % P != 0)
      throw UsageError("--schedule interleaved with --micro-batches " + std::to_string(M) +
                       " and " + p + ": give a multiple of " + std::to_string(P) +
                       " micro-batches, at least " + std::to_string(P) +
                       " (Megatron-LM's interleaved order runs them in groups of P)");
  }
  auto refuse = [&](bool bad, const std::string& flag) {
    if (bad)
      throw UsageError(p + " with " + flag + ": not supported with pipeline parallelism; " +
                       "drop one");
  };
  refuse(o.local_sgd_every > 0, "--local-sgd");
  refuse(o.batch_auto, "--batch auto");
  // zero3 cuts a stage's units from its pieces (one chunk), and reduce-scatters each
  // micro-batch's gradients: a tied embedding's two copies (held by both end stages, cut into
  // differently made units) could not be summed (torchtitan's pipelined models do not tie it).
  if (o.shard == ShardMode::kZero3 && pp.schedule == Schedule::kInterleaved)
    throw UsageError(p +
                     " with --shard zero3 and --schedule interleaved: a stage's units are cut "
                     "from one chunk; use --schedule 1f1b or gpipe, or --shard zero2");
  const bool zero_bubble = pp.schedule == Schedule::kZbH1 || pp.schedule == Schedule::kZbV;
  const std::string zb = "--schedule " + to_string(pp.schedule);
  if (o.shard == ShardMode::kZero3 && zero_bubble)
    throw UsageError(p + " with --shard zero3 and " + zb +
                     ": zero3 reduce-scatters each micro-batch's gradients at the end of its "
                     "backward, and a zero-bubble schedule computes the weight gradients later "
                     "(its W passes); use --shard zero2, or --schedule 1f1b");
  if (pp.schedule == Schedule::kZbV && o.backend == SyncBackend::kNccl)
    throw UsageError(p +
                     " with --schedule zb-v and --backend nccl: the NCCL stage channel links "
                     "each stage to its next one forward and its previous one backward, and "
                     "zb-v's second chunk runs the other way; use --backend mpi, or --schedule "
                     "zb-h1");
  if (o.shard == ShardMode::kZero3 && models::model_size(o.model, o.model_options).tied_embedding)
    throw UsageError(p + " with --shard zero3 and --model " + o.model +
                     ": its tied embedding is held by both end stages, whose sharded copies "
                     "cannot be summed; use --shard zero2 with pipeline stages, or zero3 without "
                     "them");
}

// --tp, --mesh-order and --pipeline-layout (mesh.h): the mesh's order, and its degrees checked
// against the ranks.
MeshShape parse_mesh(const std::string& order, const std::string& layout, bool order_given,
                     bool layout_given, int world_size, Options& o) {
  if (o.tp > 1) {  // tensor parallelism (models/tensor_parallel.h): what it is built for so far
    const std::string family(models::model_family(o.model).name);
    if (family != "llama" && family != "gpt2")
      throw UsageError("--tp " + std::to_string(o.tp) + " with --model " + o.model +
                       ": tensor parallelism splits the transformers' layers (gpt2-*, llama3-*, "
                       "hf:PATH); give --tp 1");
    if (o.backend == SyncBackend::kNccl)
      throw UsageError("--tp " + std::to_string(o.tp) +
                       " with --backend nccl: the tp group's collectives run over MPI only so "
                       "far; use --backend mpi");
    if (o.local_sgd_every > 0)
      throw UsageError("--tp " + std::to_string(o.tp) + " with --local-sgd: drop one");
  }
  o.mesh_order = parse_mesh_order(order);
  const PipelineLayout named = enum_value(kPipelineLayoutNames, layout);
  const MeshOrder as_layout = named == PipelineLayout::kWithinNode
                                  ? MeshOrder{MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp}
                                  : MeshOrder{MeshAxis::kTp, MeshAxis::kDp, MeshAxis::kPp};
  if (layout_given && order_given && as_layout != o.mesh_order)
    throw UsageError("--pipeline-layout " + layout + " is --mesh-order " + to_string(as_layout) +
                     ", not " + order + ": give one of the two");
  if (layout_given && !order_given) o.mesh_order = as_layout;
  // --pipeline-layout as the results file names it: where the stages sit relative to the
  // data-parallel groups (tp is always innermost-compatible: it has degree 1 today).
  auto at = [&](MeshAxis a) {
    return std::find(o.mesh_order.begin(), o.mesh_order.end(), a) - o.mesh_order.begin();
  };
  o.pipeline.layout = at(MeshAxis::kPp) < at(MeshAxis::kDp) ? PipelineLayout::kWithinNode
                                                            : PipelineLayout::kAcrossNodes;
  return make_mesh_shape(world_size, o.tp, o.pipeline.stages, o.mesh_order);  // names the flags
}

}  // namespace

int parse_options(int argc, char** argv, bool print, int world_size, int local_size, Options& o) {
  CLI::App app{
      "dtune-train: data- and pipeline-parallel training of real models, every step's time "
      "broken down per rank (launch with mpirun -np N, or as one process).",
      "dtune-train"};
  app.set_version_flag("--version", "dtune-train " + build_info::dtune_version());
  app.footer(
      "Exit status: 0 trained; 1 error; 2 bad input; 3 a rank timed out; 4 out of memory "
      "(recorded\n"
      "in the results file with status oom); 130 interrupted (SIGINT/SIGTERM: the completed steps "
      "are kept). Results layout: results/SCHEMA.md.\n"
      "Rules between flags (a value that breaks one exits 2 naming both flags; `dtune sweep "
      "plan`\nchecks them for every point): --first-bucket-mb <= --bucket-mb; --batch-sweep needs "
      "--batch auto;\n--global-batch divides by ranks x --accum-steps, and not with --batch auto; "
      "--backend nccl and\n--precision tf32 need --device cuda; --weights-dtype bf16 not with "
      "--precision fp16; --local-sgd\nnot with --accum-steps > 1; --batch auto on CPU needs "
      "--memory-limit-mb; --cache-dir needs --data;\n--fast-decode needs --decode roi; "
      "--profile-steps within --warmup-steps + --steps; --reduce-algo\nhierarchical only with "
      "--backend mpi; --output or --no-output, not both; --pipeline-stages (--pp)\ndivides the "
      "ranks; --tp > 1 needs a transformer, not with --backend nccl or --local-sgd;\n"
      "--sequence-parallel needs --tp > 1 (Llama family); --mesh-order names tp, pp and dp once "
      "each, and\n"
      "--pipeline-layout, if given too, is the same order; --virtual-stages > 1 needs --schedule\n"
      "interleaved, which needs --micro-batches a multiple of --pipeline-stages; --micro-batches "
      "equals\n--accum-steps if both are given; --pipeline-stages > 1 not with --local-sgd, "
      "--batch auto or\n--shard zero3 with a tied embedding (GPT-2) or --schedule "
      "interleaved, zb-h1 or zb-v;\n--schedule zb-v not with --backend nccl; --shard not with "
      "--local-sgd or --batch auto; --shard zero2 or zero3 not with --reduce-algo\nhierarchical; "
      "--shard zero3 not with --check-every, --channels-last, --debug-checksums or\n"
      "--debug-perturb-rank; --reshard-after-forward, --shard-unit and --shard-prefetch "
      "need\n--shard zero3.");
  app.get_formatter()->column_width(34);
  auto env = [](const char* n) { return std::string("DTUNE_TRAIN_") + n; };
  std::string batch = "8", precision = to_string(o.precision), weights = to_string(o.weights_dtype),
              optimizer = to_string(o.optimizer), device = to_string(o.device),
              backend = to_string(o.backend), reduce_algo = to_string(o.reduce_algo),
              overlap = to_string(o.overlap), compression = to_string(o.compression),
              shard = to_string(o.shard), reshard = "on", activation_checkpoint = "none";
  auto& mo = o.model_options;
  app.add_option("--model", o.model, "model name (dtune-models list)")
      ->envname(env("MODEL"))
      ->capture_default_str();
  app.add_option("--num-classes", mo.num_classes, "ResNet classes")
      ->envname(env("NUM_CLASSES"))
      ->capture_default_str();
  app.add_option("--image-size", mo.image_size, "ResNet input size")
      ->envname(env("IMAGE_SIZE"))
      ->capture_default_str();
  app.add_option("--width", mo.width, "ResNet base width")
      ->envname(env("WIDTH"))
      ->capture_default_str();
  app.add_option("--context", mo.context,
                 "transformer context length, GPT-2 or Llama (0: model default)")
      ->envname(env("CONTEXT"))
      ->capture_default_str();
  app.add_option("--vocab", mo.vocab, "transformer vocabulary, GPT-2 or Llama (0: model default)")
      ->envname(env("VOCAB"))
      ->capture_default_str();
  app.add_option("--layers", mo.layers,
                 "transformer blocks (GPT-2) or decoder layers (Llama) (0: model default)")
      ->envname(env("LAYERS"))
      ->capture_default_str();
  app.add_option("--init-from", mo.init_from,
                 "start from these weights (a .safetensors file, a sharded checkpoint's "
                 "model.safetensors.index.json, a torch.save file, or a directory holding one; "
                 "names as the model's state_dict, e.g. a Hugging Face save_pretrained directory)")
      ->envname(env("INIT_FROM"));
  app.add_option("--activation-checkpoint", activation_checkpoint,
                 "recompute activations in the backward: none, full (every transformer block) "
                 "or selective (each block's attention half); Llama family")
      ->envname(env("ACTIVATION_CHECKPOINT"))
      ->capture_default_str();
  app.add_option("--batch", batch, "samples per rank per micro-step, or auto (largest that fits)")
      ->envname(env("BATCH"))
      ->capture_default_str();
  app.add_flag("--batch-sweep", o.batch_sweep,
               "with --batch auto: measure every power of two up to the "
               "largest batch that fits (and that batch) and report the throughput-optimal one")
      ->envname(env("BATCH_SWEEP"));
  app.add_option("--global-batch", o.global_batch,
                 "samples per optimizer step over all ranks "
                 "(sets --batch = global / (ranks x accum-steps))")
      ->envname(env("GLOBAL_BATCH"));
  app.add_option("--accum-steps", o.accum_steps,
                 "micro-steps per optimizer step (gradient accumulation), 1 to 4096")
      ->envname(env("ACCUM_STEPS"))
      ->capture_default_str()
      ->check(integer_in(1, kMaxMicroSteps));
  app.add_option("--precision", precision,
                 "fp32, tf32, fp16 (autocast + dynamic loss scaling) or bf16 (autocast)")
      ->envname(env("PRECISION"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kPrecisionNames)));
  app.add_option("--weights-dtype", weights,
                 "fp32, or bf16 weights with an fp32 master copy in the optimizer")
      ->envname(env("WEIGHTS_DTYPE"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kWeightsDtypeNames)));
  app.add_option("--optimizer", optimizer, "sgd (momentum 0.9) or adamw")
      ->envname(env("OPTIMIZER"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kOptimizerNames)));
  app.add_option("--lr", o.lr, "learning rate")
      ->envname(env("LR"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--steps", o.steps, "measured optimizer steps")
      ->envname(env("STEPS"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--warmup-steps", o.warmup_steps, "steps run first and excluded from throughput")
      ->envname(env("WARMUP_STEPS"))
      ->capture_default_str()
      ->check(dtune::kNonNegative);
  app.add_option("--threads", o.threads,
                 "intra-op threads per rank (0: cores on the node / ranks on the node)")
      ->envname(env("THREADS"))
      ->capture_default_str()
      ->check(thread_count());
  app.add_flag("--channels-last", o.channels_last, "channels_last memory format (ResNet)")
      ->envname(env("CHANNELS_LAST"));
  app.add_option("--seed", o.seed, "seed of initialisation and synthetic data")
      ->envname(env("SEED"))
      ->capture_default_str();
  app.add_option("--output", o.output,
                 "HDF5 results file [default: results/dtune-train-<time>-<pid>.h5]")
      ->envname(env("OUTPUT"));
  bool no_output = false;
  app.add_flag("--no-output", no_output, "write no HDF5 file")->envname(env("NO_OUTPUT"));
  app.add_flag(
         "--overwrite", o.overwrite,
         "replace an existing --output file (default: keep it and write NAME.1.h5, NAME.2.h5, ...)")
      ->envname(env("OVERWRITE"));
  app.add_option("--device", device, "cpu or cuda (one GPU per rank)")
      ->envname(env("DEVICE"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kDeviceNames)));
  app.add_option("--backend", backend, "gradient reduction: mpi (host tensors) or nccl (GPU)")
      ->envname(env("BACKEND"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kBackendNames)));
  app.add_option("--reduce-algo", reduce_algo,
                 "with --backend mpi: flat (MPI_Iallreduce) or hierarchical (reduce within each "
                 "node, allreduce among node leaders, broadcast within each node)")
      ->envname(env("REDUCE_ALGO"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kReduceAlgoNames)));
  app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket cap in MiB (PyTorch DDP: 25)")
      ->envname(env("BUCKET_MB"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "first bucket cap in MiB (DDP: 1)")
      ->envname(env("FIRST_BUCKET_MB"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--overlap", overlap,
                 "on: reduce each bucket as soon as its gradients are ready; "
                 "off: one flat allreduce after backward")
      ->envname(env("OVERLAP"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kOverlapNames)));
  app.add_option("--compression", compression, "gradients sent as none, fp16 or bf16")
      ->envname(env("COMPRESSION"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kCompressionNames)));
  app.add_option("--shard", shard,
                 "sharded data parallelism: none (DDP: every rank holds all optimizer state), "
                 "zero1 (ZeRO stage 1: each rank keeps and steps 1/N of the optimizer state and "
                 "the fp32 master, then the ranks all-gather the updated parameters) or zero2 "
                 "(stage 2: gradient buckets reduce-scattered instead of all-reduced, so each "
                 "rank receives only its part) or zero3 (stage 3, FSDP-style: the parameters "
                 "sharded too, each unit (a transformer block, a ResNet stage, the embedding, the "
                 "head) all-gathered before its forward and backward and freed after its backward, "
                 "its gradient reduce-scattered)")
      ->envname(env("SHARD"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kShardNames)));
  app.add_option("--reshard-after-forward", reshard,
                 "--shard zero3: free each unit's gathered parameters after its forward and "
                 "gather them again before its backward (on), or keep them from forward into "
                 "backward (off: one gather per unit and step, more memory)")
      ->envname(env("RESHARD_AFTER_FORWARD"))
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--shard-unit", o.shard_unit,
                 "--shard zero3: block (one unit per transformer block or ResNet stage, the "
                 "embedding, the final norm and head, the stem and fc each their own) or a size "
                 "in MiB: the parameters cut as gradient buckets are, every unit at most that "
                 "size (a larger parameter a unit of its own), as dtune model --shard-unit-mb")
      ->envname(env("SHARD_UNIT"))
      ->capture_default_str();
  app.add_option("--shard-prefetch", o.shard_prefetch,
                 "--shard zero3: units whose gather is issued ahead of the one in use (in "
                 "forward the next N, in backward the previous N), overlapping the gathers "
                 "with compute; 0: each unit gathered when needed")
      ->envname(env("SHARD_PREFETCH"))
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--local-sgd", o.local_sgd_every,
                 "no per-step gradient sync; average parameters after "
                 "every H-th optimizer step, warm-up included, and after the last one (0: off)")
      ->envname(env("LOCAL_SGD"))
      ->capture_default_str()
      ->check(dtune::kNonNegative);
  app.add_option("--check-every", o.check_every,
                 "compare parameter checksums across ranks every K steps, "
                 "with --local-sgd only after averagings (0: at the end only)")
      ->envname(env("CHECK_EVERY"))
      ->capture_default_str()
      ->check(dtune::kNonNegative);
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "CPU: memory a rank may use (for --batch auto)")
      ->envname(env("MEMORY_LIMIT_MB"))
      ->check(dtune::kNonNegative);
  app.add_option("--peak-tflops", o.peak_tflops,
                 "peak for MFU in TFLOP/s (default: the datasheet of the "
                 "detected GPU model, A100, H100 or H200; else a measured peak, see --peak-from)")
      ->envname(env("PEAK_TFLOPS"))
      ->check(dtune::kNonNegative);
  app.add_option("--peak-from", o.peak_from,
                 "dtune-probe gemm results file whose peak MFU uses when neither --peak-tflops "
                 "nor a datasheet gives one [default: the newest results/dtune-probe-*.h5]")
      ->envname(env("PEAK_FROM"))
      ->check(CLI::ExistingFile);
  std::string timing = "on";
  app.add_option("--timing", timing,
                 "on: time every phase of every step; off: only each step's total "
                 "(a bare loop, to measure the harness's own overhead)")
      ->envname(env("TIMING"))
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--tensorboard", o.tensorboard_dir,
                 "write loss, throughput, step time and every phase time "
                 "per step as TensorBoard event files under DIR/rank<r>/")
      ->envname(env("TENSORBOARD"));
  app.add_flag(
         "--mllog", o.mllog,
         "print MLPerf :::MLLOG lines as mlperf-logging writes them "
         "(init, configuration, run, a block per batch with tracked_stats throughput) from rank 0")
      ->envname(env("MLLOG"));
  app.add_option(
         "--data", o.data,
         "training data: synthetic (fixed random batches on the device, no loading "
         "cost), or a dataset made by dtune-data: a directory or s3://bucket/prefix of WebDataset "
         "shards, an ImageFolder tree or token shards")
      ->envname(env("DATA"))
      ->capture_default_str();
  app.add_option("--workers", o.workers, "loader threads per rank (0: load in the training thread)")
      ->envname(env("WORKERS"))
      ->capture_default_str()
      ->check(thread_count());
  app.add_option("--prefetch", o.prefetch, "batches the loader builds ahead")
      ->envname(env("PREFETCH"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_flag("--strict", o.strict,
               "an undecodable or truncated sample stops the run (default: skipped and "
               "counted)")
      ->envname(env("STRICT"));
  app.add_option("--decode", o.decode,
                 "JPEG decoding of --data images: roi decodes only the rows and iMCU columns "
                 "around the crop box (the same tensors as full), full the whole image, nvjpeg "
                 "the whole image on the rank's GPU with nvJPEG (close to libjpeg's pixels, not "
                 "equal; refused without a GPU)")
      ->envname(env("DECODE"))
      ->capture_default_str()
      ->check(CLI::IsMember({"roi", "full", "nvjpeg"}));
  app.add_flag("--fast-decode", o.fast_decode,
               "scale by 1/2, 1/4 or 1/8 in the inverse DCT where the crop box is at least twice "
               "the model's input on both sides, as Pillow's draft mode (changes the pixels; "
               "needs --decode roi)")
      ->envname(env("FAST_DECODE"));
  app.add_option("--cache-dir", o.cache_dir,
                 "node-local cache tier between the loader and the data's storage: "
                 "a directory shared by the ranks of a node (a local disk, or /dev/shm for "
                 "memory); default none")
      ->envname(env("CACHE_DIR"));
  app.add_option("--cache-mb", o.cache_mb,
                 "cache capacity in MiB (least recently used blocks are evicted)")
      ->envname(env("CACHE_MB"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--cache-block-mb", o.cache_block_mb,
                 "cache block size in MiB (the unit fetched on a miss)")
      ->envname(env("CACHE_BLOCK_MB"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  std::string profile;
  app.add_option("--profile-steps", profile,
                 "START:COUNT: run the Kineto profiler over COUNT steps from "
                 "step START (0-based, warm-up steps included); prints the operator table, stores "
                 "it per rank "
                 "and writes a Chrome trace per rank (default: off)")
      ->envname(env("PROFILE_STEPS"));
  app.add_option("--profile-dir", o.profile_dir,
                 "directory for the per-rank traces rank<r>.pt.trace.json "
                 "(Perfetto, chrome://tracing, Holistic Trace Analysis)")
      ->envname(env("PROFILE_DIR"))
      ->capture_default_str();
  app.add_option("--profile-top", o.profile_top, "rows of the operator table to print")
      ->envname(env("PROFILE_TOP"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option(
         "--timeout", o.timeout_s,
         "seconds one training step (its gradient reductions and checks "
         "included), or one wait for the other ranks outside the steps, may take before the job is "
         "aborted, naming the ranks that stopped (exit 3; the completed steps are kept)")
      ->envname(env("TIMEOUT"))
      ->capture_default_str()
      ->check(kPositive);
  auto& pp = o.pipeline;
  std::string schedule = to_string(pp.schedule), layout = to_string(pp.layout),
              partition = to_string(pp.partition), pieces = to_string(pp.pieces);
  int micro_batches = 0;
  app.add_option("--pp,--pipeline-stages", pp.stages,
                 "pipeline-parallel stages P, the mesh's pp axis; ranks = data-parallel groups x "
                 "P (1: data parallelism only)")
      ->envname(env("PIPELINE_STAGES"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--tp", o.tp,
                 "tensor-parallel ranks, the mesh's tp axis: Megatron's split of each GPT-2 and "
                 "Llama layer (column-parallel q/k/v and the MLP's first, row-parallel the "
                 "attention's and the MLP's output, the vocabulary split); T must divide the "
                 "heads, KV heads, MLP width and --vocab")
      ->envname(env("TP"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  bool sequence_parallel = false;
  app.add_flag("--sequence-parallel", sequence_parallel,
               "Megatron's sequence parallelism with --tp: the residual stream and the norms cut "
               "along the sequence, all-gather and reduce-scatter in place of the all-reduces "
               "(--context a multiple of --tp)")
      ->envname(env("SEQUENCE_PARALLEL"));
  std::string mesh_order = to_string(o.mesh_order);
  app.add_option("--mesh-order", mesh_order,
                 "the mesh's axes tp, pp, dp, innermost first: consecutive ranks differ on the "
                 "first (tp,pp,dp: a pipeline's stages are consecutive ranks; tp,dp,pp: a "
                 "stage's data-parallel group is)")
      ->envname(env("MESH_ORDER"))
      ->capture_default_str();
  app.add_option("--micro-batches", micro_batches,
                 "micro-batches M of --batch samples per optimizer step through each pipeline "
                 "(the same as --accum-steps), 1 to 4096 [default: --accum-steps]")
      ->envname(env("MICRO_BATCHES"))
      ->check(integer_in(1, kMaxMicroSteps));
  app.add_option("--schedule", schedule,
                 "pipeline schedule: gpipe (all forwards, then all backwards), 1f1b "
                 "(PipeDream-Flush), interleaved (Megatron-LM's interleaved 1F1B), zb-h1 (zero "
                 "bubble: 1F1B with the linear layers' weight gradients deferred into the "
                 "bubble) or zb-v (zero bubble with two chunks per stage placed as a V)")
      ->envname(env("SCHEDULE"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kScheduleNames)));
  app.add_option("--virtual-stages", pp.virtual_stages,
                 "model chunks V per stage for --schedule interleaved")
      ->envname(env("VIRTUAL_STAGES"))
      ->capture_default_str()
      ->check(dtune::kPositive);
  app.add_option("--pipeline-layout", layout,
                 "within-node: a pipeline's stages are consecutive ranks (stage = rank mod P; "
                 "--mesh-order tp,pp,dp); across-nodes: a stage's data-parallel group is (stage "
                 "= rank / groups; tp,dp,pp)")
      ->envname(env("PIPELINE_LAYOUT"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kPipelineLayoutNames)));
  app.add_option("--partition", partition,
                 "cut the model into stages balancing counted FLOPs, or block times measured "
                 "once before training (measured)")
      ->envname(env("PARTITION"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kPartitionNames)));
  app.add_option("--stage-pieces", pieces,
                 "what the cut may fall between: blocks (the embedding with the first block, the "
                 "head and loss with the last), ends (the embedding and the head pieces of their "
                 "own, which a stage may hold alone, as Megatron-LM and torchtitan weigh them "
                 "for large vocabularies)")
      ->envname(env("STAGE_PIECES"))
      ->capture_default_str()
      ->check(CLI::IsMember(enum_names(kStagePiecesNames)));
  app.add_option("--debug-chunk-sleep-ms", pp.debug_chunk_sleep_ms,
                 "test only: each forward of a stage's model chunk also sleeps this long, each "
                 "backward twice as long (balanced synthetic stages)")
      ->group("Testing");
  app.add_option("--debug-plant-inf-step", o.plant_inf_step,
                 "test only: plant an inf gradient at this step")
      ->group("Testing");
  app.add_option("--debug-plant-inf-rank", o.plant_inf_rank, "test only: on this rank")
      ->group("Testing");
  app.add_option("--debug-perturb-rank", o.perturb_rank,
                 "test only: this rank's parameters drift after "
                 "the first step (the divergence guard must name it)")
      ->group("Testing");
  app.add_option("--debug-dump", o.dump_path,
                 "test only: rank 0 saves final parameters and the last "
                 "step's averaged gradients (torch.save format)")
      ->group("Testing");
  app.add_option("--debug-checksums", o.checksums_path,
                 "test only: every rank appends \"step checksum\" after each optimizer step to "
                 "FILE.rank<r> (the fp64 sum of all its parameters)")
      ->group("Testing");

  const int rc = parse_cli(app, argc, argv, print);
  if (rc >= 0) return rc;

  if (micro_batches > 0) {  // before --global-batch, which divides by the micro-batches
    if (o.accum_steps > 1 && o.accum_steps != micro_batches)
      throw UsageError("--micro-batches " + std::to_string(micro_batches) + " and --accum-steps " +
                       std::to_string(o.accum_steps) + " differ: they are the same; keep one");
    o.accum_steps = micro_batches;
  }
  o.pipeline.micro_batches = o.accum_steps;
  if (!models::model_family(o.model).sequence)  // GPT's shape flags would be ignored silently
    for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--layers", mo.layers},
                                      {"--context", mo.context},
                                      {"--vocab", mo.vocab}})
      if (value != 0)
        throw UsageError(std::string(flag) + " " + std::to_string(value) + " with --model " +
                         o.model + ": " + flag +
                         " shapes the GPT-2 models only; drop it (a ResNet's depth is its name, "
                         "e.g. --model resnet50)");
  const MeshShape mesh = parse_mesh(mesh_order, layout, app.count("--mesh-order") > 0,
                                    app.count("--pipeline-layout") > 0, world_size, o);
  constexpr double kMaxTimeoutS = 1e6;  // as dtune-comm: past this a deadline means no deadline
  if (o.timeout_s > kMaxTimeoutS) throw UsageError("--timeout: at most 1000000 s (about 11 days)");
  if (batch == "auto") {
    o.batch_auto = true;
    o.batch = 0;
  } else {
    try {
      size_t pos = 0;
      o.batch = std::stoll(batch, &pos);
      if (pos != batch.size() || o.batch < 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw UsageError("--batch '" + batch + "': give a positive sample count or auto");
    }
  }
  if (o.batch_sweep && !o.batch_auto) throw UsageError("--batch-sweep needs --batch auto");
  if (o.global_batch > 0) {
    if (o.batch_auto) throw UsageError("--global-batch and --batch auto both given: keep one");
    const int64_t dp = mesh[MeshAxis::kDp];  // data-parallel groups
    const int64_t per = dp * o.accum_steps;
    if (o.global_batch % per != 0)
      throw UsageError("--global-batch " + std::to_string(o.global_batch) +
                       " does not divide by data-parallel ranks (" + std::to_string(dp) +
                       ") x --accum-steps (" + std::to_string(o.accum_steps) +
                       "): choose a multiple of " + std::to_string(per));
    o.batch = o.global_batch / per;
  }
  o.precision = enum_value(kPrecisionNames, precision);
  o.weights_dtype = enum_value(kWeightsDtypeNames, weights);
  o.optimizer = enum_value(kOptimizerNames, optimizer);
  o.device = enum_value(kDeviceNames, device);
  o.backend = enum_value(kBackendNames, backend);
  o.reduce_algo = enum_value(kReduceAlgoNames, reduce_algo);
  if (o.backend == SyncBackend::kNccl && o.reduce_algo == ReduceAlgo::kHierarchical)
    throw UsageError("--reduce-algo hierarchical is for --backend mpi: drop one of them");
  o.overlap = enum_value(kOverlapNames, overlap);
  o.compression = enum_value(kCompressionNames, compression);
  o.shard = enum_value(kShardNames, shard);
  if (o.shard != ShardMode::kNone && o.local_sgd_every > 0)
    throw UsageError(
        "--shard " + shard +
        " with --local-sgd: local SGD keeps every rank's own optimizer state; drop one");
  // zero2 and zero3 reduce-scatter gradients; the hierarchical algorithm only all-reduces.
  if ((o.shard == ShardMode::kZero2 || o.shard == ShardMode::kZero3) &&
      o.reduce_algo == ReduceAlgo::kHierarchical)
    throw UsageError("--shard " + shard +
                     " with --reduce-algo hierarchical: the hierarchical algorithm "
                     "all-reduces, and this mode reduce-scatters; drop one");
  o.reshard_after_forward = reshard == "on";
  if (o.shard == ShardMode::kZero3) {
    auto refuse3 = [](bool bad, const std::string& flag, const std::string& why) {
      if (bad) throw UsageError("--shard zero3 with " + flag + ": " + why + "; drop one");
    };
    refuse3(o.check_every > 0, "--check-every",
            "the parameters are sharded between steps (the final check still runs)");
    refuse3(o.channels_last, "--channels-last", "a unit's parameters are one flat buffer");
    refuse3(!o.checksums_path.empty() || o.perturb_rank >= 0,
            "--debug-checksums or --debug-perturb-rank",
            "they read the parameters between steps, which are sharded");
  }
  for (const char* flag : {"--reshard-after-forward", "--shard-unit", "--shard-prefetch"})
    if (app.count(flag) > 0 && o.shard != ShardMode::kZero3)
      throw UsageError(std::string(flag) + " with --shard " + shard +
                       ": it is for --shard zero3; drop it");
  o.shard_unit_mib = models::parse_shard_unit(o.shard_unit).mib;
  if (o.shard != ShardMode::kNone && o.batch_auto)
    throw UsageError("--shard " + shard +
                     " with --batch auto: the batch finder probes unsharded; give --batch");
  if (o.backend == SyncBackend::kNccl && o.device != DeviceKind::kCuda)
    throw UsageError("--backend nccl needs --device cuda (NCCL reduces GPU tensors)");
  if (o.precision == Precision::kTf32 && o.device != DeviceKind::kCuda)
    throw UsageError("--precision tf32 needs --device cuda (TF32 is a tensor-core mode)");
  if (o.weights_dtype == WeightsDtype::kBf16 && o.precision == Precision::kFp16)
    throw UsageError(
        "--weights-dtype bf16 with --precision fp16: use --precision bf16 with bf16 weights");
  if (o.local_sgd_every > 0 && o.accum_steps > 1)
    throw UsageError("--local-sgd with --accum-steps > 1: pick one way of reducing communication");
  if (o.batch_auto && o.device == DeviceKind::kCpu && o.memory_limit_mb <= 0)
    throw UsageError("--batch auto on CPU needs --memory-limit-mb (the memory a rank may use)");
  if (o.first_bucket_mb > o.bucket_mb)
    throw UsageError("--first-bucket-mb (" + std::to_string(o.first_bucket_mb) +
                     ") exceeds --bucket-mb (" + std::to_string(o.bucket_mb) +
                     "): make --first-bucket-mb at most --bucket-mb");
  if (o.threads == 0) {
    const unsigned cores = std::thread::hardware_concurrency();
    o.threads = std::max(1, static_cast<int>(cores) / std::max(1, local_size));
  }
  o.timing = timing == "on";
  if (!profile.empty()) parse_profile_steps(profile, o);
  parse_pipeline(schedule, partition, pieces, o);
  if (!o.cache_dir.empty() && o.data == "synthetic")
    throw UsageError(
        "--cache-dir with --data synthetic: the cache holds a dataset's blocks; give --data");
  if (o.fast_decode && o.decode != "roi")
    throw UsageError("--fast-decode with --decode " + o.decode +
                     ": it scales the region decode; drop one");
  o.model_options.seed = o.seed;
  if (sequence_parallel && o.tp < 2)
    throw UsageError(
        "--sequence-parallel needs --tp 2 or more (it cuts the sequence over the "
        "tensor-parallel ranks)");
  if (sequence_parallel && models::model_family(o.model).name != "llama")
    throw UsageError("--sequence-parallel with --model " + o.model +
                     ": sequence parallelism is built for the Llama family (llama3-*, hf:PATH)");
  mo.sequence_parallel = sequence_parallel;
  mo.activation_checkpoint = models::parse_activation_checkpoint(activation_checkpoint);
  if (mo.activation_checkpoint != models::ActivationCheckpoint::kNone &&
      models::model_family(o.model).name != "llama")
    throw UsageError("--activation-checkpoint " + activation_checkpoint + " with --model " +
                     o.model +
                     ": only the Llama family recomputes activations (llama3-*, hf:PATH)");
  if (!mo.init_from.empty() && !std::filesystem::exists(mo.init_from))
    throw UsageError("--init-from " + mo.init_from + ": no such file or directory");
  (void)models::model_size(o.model, mo);  // an hf: config that cannot be built: exit 2 here
  const char* dir = std::getenv("DTUNE_RESULTS_DIR");
  if (no_output && !o.output.empty())
    throw UsageError("--no-output and --output both given: keep one");
  if (!no_output && o.output.empty())
    o.output = default_results_path(dir ? dir : "results", "dtune-train");
  o.command_line = join_command_line(argc, argv);
  return -1;
}

}  // namespace dtune::train
