// dtune-data: datasets for the data-pipeline benchmarks. `make images|tokens` writes them (to a
// directory or s3://bucket/prefix), `index` writes the dataset.json manifest for shards or image
// folders that exist, `bench` runs the loader alone (under mpirun: one slice per rank).
#include <cstdio>

#include "benchmarks/data/bench_loader.h"
#include "benchmarks/data/make_dataset.h"
#include "core/cli.h"
#include "core/main_guard.h"

int main(int argc, char** argv) {
  return dtune::run_main(argc, argv, "dtune-data", [](const dtune::MainArgs& a) {
    namespace dd = dtune::data;
    CLI::App app{"dtune-data: make, index and benchmark datasets for dtune's loader"};
    app.require_subcommand(1);
    dd::MakeImagesOptions mi;
    dd::MakeTokensOptions mt;
    CLI::App* make = app.add_subcommand("make", "write a dataset")->require_subcommand(1);
    CLI::App* images =
        make->add_subcommand("images",
                             "WebDataset shards (or an ImageFolder tree) of JPEGs with "
                             "class structure, and dataset.json");
    images->add_option("--out", mi.out, "directory or s3://bucket/prefix")->required();
    images->add_option("--samples", mi.samples, "images")->capture_default_str();
    images->add_option("--classes", mi.classes, "classes (labels 0..K-1, round robin)")
        ->capture_default_str();
    images->add_option("--width", mi.width, "pixels (at most 65500, libjpeg's limit)")
        ->capture_default_str();
    images->add_option("--height", mi.height, "pixels (at most 65500)")->capture_default_str();
    images
        ->add_option("--size-jitter", mi.size_jitter,
                     "each side scaled by a random factor in [1-j, 1+j]")
        ->capture_default_str();
    images->add_option("--shard-samples", mi.shard_samples, "images per shard")
        ->capture_default_str();
    images->add_option("--quality", mi.quality, "JPEG quality 1-100")->capture_default_str();
    images->add_option("--seed", mi.seed, "random seed")->capture_default_str();
    images->add_option("--layout", mi.layout, "webdataset or imagefolder")
        ->capture_default_str()
        ->check(CLI::IsMember({"webdataset", "imagefolder"}));
    CLI::App* tokens = make->add_subcommand("tokens",
                                            "llm.c token shards (byte-level) from text files, and "
                                            "dataset.json");
    tokens->add_option("--out", mt.out, "directory or s3://bucket/prefix")->required();
    tokens->add_option("--input", mt.inputs, "text files")->required();
    tokens->add_option("--shard-tokens", mt.shard_tokens, "tokens per shard")
        ->capture_default_str();
    tokens->add_option("--repeat", mt.repeat, "concatenate the inputs this many times")
        ->capture_default_str();
    std::string index_url;
    CLI::App* index = app.add_subcommand("index",
                                         "write dataset.json for the shards, token files or class "
                                         "folders under a directory or s3:// prefix");
    index->add_option("url", index_url, "directory or s3://bucket/prefix")->required();
    dd::BenchOptions b;
    CLI::App* bench = app.add_subcommand("bench",
                                         "run the loader alone and print samples/s and its time "
                                         "breakdown per epoch");
    bench->add_option("url", b.url, "dataset: directory or s3://bucket/prefix")->required();
    bench->add_option("--batch", b.loader.batch, "samples per batch per rank")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench->add_option("--workers", b.loader.workers, "loader threads (0: in the consumer's thread)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    bench->add_option("--prefetch", b.loader.prefetch, "batches built ahead")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench->add_option("--image-size", b.loader.image_size, "output side in pixels")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench->add_option("--context", b.loader.context, "tokens per sample (token datasets)")
        ->capture_default_str();
    bench->add_option("--seed", b.loader.seed, "shuffling and augmentation seed")
        ->capture_default_str();
    bench->add_option("--epochs", b.epochs, "epochs")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench
        ->add_option("--max-batches", b.max_batches,
                     "stop each epoch after this many batches (0: all)")
        ->capture_default_str();
    bench->add_flag("--strict", b.loader.strict, "a bad sample is an error instead of skipped");
    bool keep_last = false;
    bench->add_flag("--keep-last", keep_last, "also deliver the last, partial batch of each rank");
    bool no_augment = false;
    bench->add_flag("--no-augment", no_augment,
                    "resize + center crop instead of random-resized crop + flip");
    bench->add_option("--dump-ids", b.dump_ids,
                      "write the sample ids each rank got to FILE.rank<r>");
    double cache_mb = 8192, cache_block_mb = 8;
    bench->add_option("--cache-dir", b.cache.dir,
                      "node-local cache tier directory (a disk, or /dev/shm for "
                      "memory), shared by the ranks of a node; default none");
    bench->add_option("--cache-mb", cache_mb, "cache capacity in MiB (LRU eviction)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench->add_option("--cache-block-mb", cache_block_mb, "cache block (fetch unit) in MiB")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    bench
        ->add_option("--timeout", b.timeout_s,
                     "seconds the ranks wait for each other at an epoch's "
                     "start and end before the job is aborted, naming what it waited for")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench
        ->add_flag("--debug-same-slice", b.same_slice,
                   "test only: every rank reads the whole epoch")
        ->group("Testing");

    const int rc = dtune::parse_cli(app, a.argc, a.argv, a.ctx.is_root());
    if (rc >= 0) return rc;
    if (*images) {
      const std::string what = dd::make_images(mi);
      std::printf("# made %s\n", what.c_str());
    } else if (*tokens) {
      const std::string what = dd::make_tokens(mt);
      std::printf("# made %s\n", what.c_str());
    } else if (*index) {
      std::printf("# indexed %s\n", dd::index_data(index_url).c_str());
    } else if (*bench) {
      b.loader.drop_last = !keep_last;
      b.cache.capacity_bytes = static_cast<int64_t>(cache_mb * (1 << 20));
      b.cache.block_bytes = static_cast<int64_t>(cache_block_mb * (1 << 20));
      b.loader.augment = !no_augment;
      return dd::bench_loader(a.ctx, a.watchdog, b);
    }
    return 0;
  });
}
