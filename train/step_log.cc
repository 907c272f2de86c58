// Incremental writing of a training run's steps.
#include "train/step_log.h"

#include <vector>

#include "train/mesh.h"

namespace dtune::train {
namespace {

// The configuration: everything known before the first step (the rest comes with the summary).
void write_config(hid_t id, const Options& o, int64_t batch, size_t ranks) {
  h5::write_attr(id, "benchmark", "train");
  h5::write_attr(id, "status", "running");
  h5::write_attr(id, "model", o.model);
  h5::write_attr(id, "activation_checkpoint",
                 models::activation_checkpoint_name(o.model_options.activation_checkpoint));
  h5::write_attr(id, "init_from", o.model_options.init_from);
  h5::write_attr(id, "sequence_parallel",
                 static_cast<int64_t>(o.model_options.sequence_parallel ? 1 : 0));
  h5::write_attr(id, "batch", static_cast<int64_t>(batch));
  h5::write_attr(id, "batch_auto", static_cast<int64_t>(o.batch_auto));
  h5::write_attr(id, "accum_steps", o.accum_steps);
  const MeshShape mesh =
      make_mesh_shape(static_cast<int>(ranks), o.tp, o.pipeline.stages, o.mesh_order);
  h5::write_attr(id, "global_batch",
                 static_cast<int64_t>(batch * mesh[MeshAxis::kDp] * o.accum_steps));
  h5::write_attr(id, "precision", to_string(o.precision));
  h5::write_attr(id, "tf32", static_cast<int64_t>(o.precision == Precision::kTf32));
  h5::write_attr(id, "weights_dtype", to_string(o.weights_dtype));
  h5::write_attr(id, "optimizer", to_string(o.optimizer));
  h5::write_attr(id, "lr", o.lr);
  h5::write_attr(id, "device", to_string(o.device));
  h5::write_attr(id, "backend", to_string(o.backend));
  h5::write_attr(id, "reduce_algo", to_string(o.reduce_algo));
  h5::write_attr(id, "overlap", to_string(o.overlap));
  h5::write_attr(id, "bucket_mb", o.bucket_mb);
  h5::write_attr(id, "first_bucket_mb", o.first_bucket_mb);
  h5::write_attr(id, "compression", to_string(o.compression));
  h5::write_attr(id, "local_sgd_every", o.local_sgd_every);
  h5::write_attr(id, "shard", to_string(o.shard));
  if (o.shard == ShardMode::kZero3) {
    h5::write_attr(id, "reshard_after_forward", static_cast<int64_t>(o.reshard_after_forward));
    h5::write_attr(id, "shard_unit", o.shard_unit);
    h5::write_attr(id, "shard_prefetch", static_cast<int64_t>(o.shard_prefetch));
  }
  h5::write_attr(id, "channels_last", static_cast<int64_t>(o.channels_last));
  h5::write_attr(id, "threads", o.threads);
  h5::write_attr(id, "world_size", static_cast<int64_t>(ranks));
  h5::write_attr(id, "steps", o.steps);
  h5::write_attr(id, "warmup_steps", o.warmup_steps);
  h5::write_attr(id, "data", o.data);
  h5::write_attr(id, "workers", o.workers);
  h5::write_attr(id, "prefetch", o.prefetch);
  h5::write_attr(id, "decode", o.decode);
  h5::write_attr(id, "fast_decode", static_cast<int64_t>(o.fast_decode));
  h5::write_attr(id, "cache_dir", o.cache_dir);
  h5::write_attr(id, "pipeline_stages", o.pipeline.stages);
  h5::write_attr(id, "micro_batches", o.pipeline.micro_batches);
  h5::write_attr(id, "schedule", to_string(o.pipeline.schedule));
  h5::write_attr(id, "virtual_stages", o.pipeline.virtual_stages);
  h5::write_attr(id, "pipeline_layout", to_string(o.pipeline.layout));
  h5::write_attr(id, "partition", to_string(o.pipeline.partition));
  h5::write_attr(id, "stage_pieces", to_string(o.pipeline.pieces));
  // The mesh: its degrees, its order and every rank's coordinates (mesh.h).
  for (MeshAxis a : {MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kTp}) {
    h5::write_attr(id, "mesh_" + to_string(a), static_cast<int64_t>(mesh[a]));
    std::vector<int64_t> coord(ranks);
    for (size_t r = 0; r < ranks; ++r)
      coord[r] = mesh.coords(static_cast<int>(r))[static_cast<size_t>(a)];
    h5::write_dataset(id, "mesh_" + to_string(a) + "_coord", {ranks}, coord.data());
  }
  h5::write_attr(id, "mesh_order", to_string(o.mesh_order));
  h5::write_attr(id, "steps_written", static_cast<int64_t>(0));
}

const char* field_name(size_t f) {
  return f < kPhases ? kPhaseNames[f] : f == kPhases ? "total_ms" : "loss";
}

}  // namespace

std::string run_description(const Options& o, int64_t batch) {
  return "train-" + o.model + "-" + to_string(o.precision) + "-b" + std::to_string(batch);
}

StepLog::StepLog(ResultsFile* file, const Options& o, int64_t batch, size_t ranks)
    : file_(file),
      o_(o),
      batch_(batch),
      ranks_(ranks),
      last_flush_(std::chrono::steady_clock::now()) {}

void StepLog::open_group() {
  if (!file_ || group_.valid()) return;
  group_ = file_->new_run(run_description(o_, batch_));
  write_config(group_.get(), o_, batch_, ranks_);
  for (size_t f = 0; f < kStepFields; ++f)
    columns_.push_back(h5::create_rows(group_.get(), field_name(f), {ranks_}, H5T_IEEE_F64LE));
  columns_.push_back(h5::create_rows(group_.get(), "loss_scale", {}, H5T_IEEE_F64LE));
  columns_.push_back(h5::create_rows(group_.get(), "skipped", {}, H5T_STD_I64LE));
  columns_.push_back(h5::create_rows(group_.get(), "profiled", {}, H5T_STD_I64LE));
}

void StepLog::add(const double* fields, const StepRecord& rank0) {
  rows_.insert(rows_.end(), fields, fields + ranks_ * kStepFields);
  loss_scale_.push_back(rank0.loss_scale);
  skipped_.push_back(rank0.skipped);
  profiled_.push_back(rank0.profiled);
}

bool StepLog::flush_if_due() {
  const std::chrono::duration<double> since = std::chrono::steady_clock::now() - last_flush_;
  if (since.count() < kFlushEveryS) return false;
  flush();
  return true;
}

void StepLog::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  if (!file_) return;
  open_group();
  const size_t S = steps(), n = S - written_;
  if (n > 0) {
    // Datasets are [S, R] by field; the rows are held (S, R, field): one column at a time.
    std::vector<double> col(n * ranks_);
    for (size_t f = 0; f < kStepFields; ++f) {
      for (size_t s = 0; s < n; ++s)
        for (size_t r = 0; r < ranks_; ++r) col[s * ranks_ + r] = at(written_ + s, r, f);
      h5::append_rows(columns_[f].get(), n, H5T_NATIVE_DOUBLE, col.data());
    }
    h5::append_rows(columns_[kStepFields].get(), n, H5T_NATIVE_DOUBLE,
                    loss_scale_.data() + written_);
    h5::append_rows(columns_[kStepFields + 1].get(), n, H5T_NATIVE_INT64,
                    skipped_.data() + written_);
    h5::append_rows(columns_[kStepFields + 2].get(), n, H5T_NATIVE_INT64,
                    profiled_.data() + written_);
    written_ = S;
  }
  h5::write_attr(group_.get(), "steps_written", static_cast<int64_t>(written_));
  file_->flush();
}

void StepLog::close(const std::string& status, const std::string& message) {
  if (closed_ || !file_ || (!group_.valid() && steps() == 0)) return;
  closed_ = true;
  open_group();
  h5::write_attr(group_.get(), "status", status);
  if (!message.empty()) h5::write_attr(group_.get(), "message", message);
  flush();
  // Released now: HDF5 closes a file only when its last object is closed, and the file may be
  // finished next (on the watchdog's thread, just before the job is aborted).
  columns_.clear();
  group_.close();
}

}  // namespace dtune::train
