// dtune-train: data-parallel training of real models with a per-step, per-rank time breakdown.
// Launch: mpirun -np N dtune-train --model resnet18 --batch 32 (or run it as one process).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/train/options.h"
#include "benchmarks/train/train_results.h"
#include "core/deadline.h"
#include "core/device_info.h"
#include "core/error.h"
#include "core/main_guard.h"
#include "core/provenance.h"
#include "core/results_file.h"
#include "core/signals.h"
#include "models/family.h"
#include "train/batch_finder.h"
#include "train/host_fit.h"
#include "train/memory_meter.h"
#include "train/mesh.h"
#include "train/run_monitor.h"
#include "train/telemetry/mllog.h"
#include "train/trainer.h"

namespace {

// Precision names as the MLPerf checker accepts them for lowest_numerical_precision_in_*
// (mlperf_logging/compliance_checker/training_6.1.0/common.yaml: fp32 tf32 fp16 bfloat16 ...).
const char* mllog_precision(const dtune::train::Options& o) {
  using dtune::train::Precision;
  if (o.weights_dtype == dtune::train::WeightsDtype::kBf16 || o.precision == Precision::kBf16)
    return "bfloat16";
  return o.precision == Precision::kFp16   ? "fp16"
         : o.precision == Precision::kTf32 ? "tf32"
                                           : "fp32";
}

// Gradients travel in the --compression dtype, else in the parameters' (grad_sync.cc, wire_dtype).
const char* mllog_comm_precision(const dtune::train::Options& o) {
  using dtune::train::Compression;
  if (o.compression == Compression::kFp16) return "fp16";
  if (o.compression == Compression::kBf16) return "bfloat16";
  return o.weights_dtype == dtune::train::WeightsDtype::kBf16 ? "bfloat16" : "fp32";
}

// LibTorch appends a backtrace to its messages ("Exception raised from ..."): the first line.
std::string first_line(const char* what) {
  const std::string s = what;
  return s.substr(0, s.find('\n'));
}

constexpr int kInterruptedExitStatus = 130;  // 128 + SIGINT, as shells report it

}  // namespace

int main(int argc, char** argv) {
  dtune::end_process(dtune::run_main(argc, argv, "dtune-train", [](const dtune::MainArgs& a) {
    namespace tr = dtune::train;
    tr::CpuMemoryMeter::install();  // before the first tensor: every CPU allocation is counted
    tr::Options o;
    const int rc = tr::parse_options(a.argc, a.argv, a.ctx.is_root(), a.ctx.world_size(),
                                     a.ctx.local_size(), o);
    if (rc >= 0) return rc;
    tr::refuse_impossible_sizes(o, a.ctx);
    // MLPerf's phases: init (setup, --batch auto probing), then the run; a block per measured
    // batch.
    tr::Mllog ml(o.mllog && a.ctx.is_root());
    ml.start("init_start");
    const std::string device =
        dtune::describe_device(tr::device_ordinal(o, a.ctx));  // "cpu", "cuda:1 ..."
    // The set-up's collectives (rank 0's verdict on the output file, the ranks' provenance, the
    // rank board) run armed, as everything after them does.
    std::optional<dtune::DeadlineGuard> setup_guard;
    setup_guard.emplace(a.watchdog, o.timeout_s,
                        "setting up (the results file, every rank's host and device)");
    std::optional<dtune::ResultsFile> file;
    if (!o.output.empty())
      file = dtune::create_results_on_root(
          a.ctx, o.output, "dtune-train", "--output",
          o.overwrite ? dtune::Existing::kOverwrite : dtune::Existing::kNewName);
    const dtune::Provenance prov = dtune::collect_provenance(a.ctx, o.command_line, device, "");
    if (file) file->write_provenance(prov);
    if (const auto m = a.ctx.launcher_mismatch(); m.expected > 1 && a.ctx.is_root())
      std::fprintf(stderr,
                   "dtune-train: warning: MPI world size is 1 but %s=%d: the launcher started "
                   "separate singletons, not one job\n",
                   m.variable.c_str(), m.expected);
    tr::RunMonitor monitor(o, a, file);
    // A run saved on its way out of a failure keeps rank 0's own part of its mode's results (a
    // pipeline's stage rows).
    monitor.on_save([&] {
      if (const tr::ModeResults* m = monitor.mode()) tr::write_partial_mode(monitor, *m);
    });
    setup_guard.reset();
    dtune::install_stop_handlers();  // the ranks agree on a stop at the end of a step
    int64_t batch = o.batch;
    if (o.batch_auto) {
      batch = tr::find_batch(o, a, monitor);
      if (a.ctx.is_root())
        std::printf("# --batch auto: %lld samples per rank is the largest that fits\n",
                    static_cast<long long>(batch));
    }
    // With --batch-sweep: every power of two below the largest batch, then that batch; each is a
    // run of its own in the results file.
    std::vector<int64_t> batches;
    if (o.batch_sweep)
      for (int64_t b = 1; b < batch; b *= 2) batches.push_back(b);
    batches.push_back(batch);
    ml.event("submission_benchmark", o.model);
    ml.event("seed", o.seed);
    ml.event("gradient_accumulation_steps", o.accum_steps);
    ml.event("opt_name", tr::to_string(o.optimizer));
    ml.event("opt_base_learning_rate", o.lr);
    ml.event("lowest_numerical_precision_in_linear", mllog_precision(o));
    if (dtune::models::model_family(o.model).sequence)  // attention
      ml.event("lowest_numerical_precision_in_attn", mllog_precision(o));
    ml.event("lowest_numerical_precision_in_comm", mllog_comm_precision(o));
    ml.event("tensor_parallelism", o.tp);
    for (const char* k : {"context_parallelism", "expert_parallelism"}) ml.event(k, 1);
    ml.event("pipeline_parallelism", o.pipeline.stages);
    ml.event("dtune_precision", tr::to_string(o.precision));
    ml.event("dtune_world_size", a.ctx.world_size());
    ml.event("dtune_steps", o.steps);
    ml.event("dtune_warmup_steps", o.warmup_steps);
    ml.end("init_stop");
    ml.start("run_start");
    int64_t samples_done = 0, steps_done = 0;  // over all blocks, warm-up steps included
    int code = 0;
    bool in_block = false;
    std::string status =
        "complete";  // the file's; "failed" when the divergence guard stopped the run
    // Every way out of training saves the completed steps first (rank 0), then goes on to
    // main_guard, which ends the job (exit 3 timeout, 2 usage, 1 other).
    try {
      int64_t best = 0;
      double best_rate = 0;
      const int dp = tr::make_mesh_shape(a.ctx.world_size(), o.tp, o.pipeline.stages,
                                         o.mesh_order)[tr::MeshAxis::kDp];
      for (int64_t b : batches) {
        const int64_t global = b * dp * o.accum_steps;
        ml.start("block_start", nullptr, {{"samples_count", samples_done}});
        in_block = true;
        ml.event("micro_batch_size", b);
        ml.event("global_batch_size", global);
        const tr::TrainOutcome out = tr::run_training(o, a, b, tr::RunMode::kTrain, &monitor);
        const double rate = tr::report_training(o, a.ctx, out, monitor);
        if (!out.diverged.empty()) {
          // Every rank has the verdict; what was measured up to it is written (status "diverged").
          if (a.ctx.is_root())
            std::fprintf(stderr, "dtune-train: error: %s\n", out.diverged.c_str());
          code = 1;
          status = "failed";
          break;
        }
        steps_done += static_cast<int64_t>(out.steps.size());
        samples_done += static_cast<int64_t>(out.steps.size()) * global;
        if (out.interrupted) {
          code = kInterruptedExitStatus;
          status = "interrupted";
          break;
        }
        ml.event("tracked_stats", {{"throughput", rate}}, {{"step", steps_done}});
        ml.end("block_stop", nullptr, {{"samples_count", samples_done}});
        in_block = false;
        if (rate > best_rate) {
          best_rate = rate;
          best = b;
        }
      }
      if (o.batch_sweep && a.ctx.is_root())
        std::printf(
            "# --batch-sweep: batch %lld per rank is the fastest (%.2f samples/s) of %zu "
            "measured\n",
            static_cast<long long>(best), best_rate, batches.size());
    } catch (const tr::OutOfMemory& e) {
      // Every rank runs the same shapes, so every rank gets here at the same step.
      if (a.ctx.is_root()) tr::report_oom(o, e, monitor, file);
      code = tr::kOomExitStatus;
    } catch (const dtune::TimeoutError& e) {
      // A rank that was stopped and resumed finds its peer gone: that peer ended the job and
      // said why; a second message would blame it wrongly.
      if (const std::string by = monitor.ended_by(); !by.empty())
        throw dtune::EndedElsewhere(by, dtune::kTimeoutExitStatus);
      monitor.mark_ended(dtune::kTimeoutExitStatus);
      monitor.save("timeout", "timeout", dtune::kTimeoutExitStatus, e.what());
      throw dtune::TimeoutError(std::string(e.what()) + "; " + monitor.diagnose());
    } catch (const dtune::UsageError& e) {
      monitor.save("failed", "failed", dtune::kUsageExitStatus, e.what());
      throw;
    } catch (const std::exception& e) {
      monitor.save("failed", "failed", 1, first_line(e.what()));
      throw;
    }
    if (in_block) ml.end("block_stop", nullptr, {{"samples_count", samples_done}});
    ml.end("run_stop", nullptr, {{"status", code == 0 ? "success" : "aborted"}});
    if (file) {
      file->finish(status, code);
      if (file->runs() > 0) std::printf("# Results: %s\n", file->path().c_str());
    }
    return code;
  }));
}
