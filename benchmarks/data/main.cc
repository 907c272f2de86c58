// dtune-data: datasets for the data-pipeline benchmarks. `convert` turns your own images or text
// into shards, `make images|tokens` writes synthetic ones (to a directory or s3://bucket/prefix),
// `index` writes the dataset.json manifest for shards or image folders that exist, `bench` runs
// the loader alone (under mpirun: one slice per rank).
#include <cstdio>
#include <cstdlib>

#include "benchmarks/data/bench_loader.h"
#include "benchmarks/data/convert.h"
#include "benchmarks/data/make_dataset.h"
#include "core/cli.h"
#include "core/error.h"
#include "core/main_guard.h"
#include "core/results_file.h"

int main(int argc, char** argv) {
  dtune::end_process(dtune::run_main(argc, argv, "dtune-data", [](const dtune::MainArgs& a) {
    namespace dd = dtune::data;
    CLI::App app{
        "dtune-data: convert your images or text into shards, make synthetic datasets, index "
        "them and benchmark dtune's loader on them."};
    app.require_subcommand(1);
    dd::ConvertImagesOptions ci;
    dd::ConvertTokensOptions ct;
    bool convert_progress = false;
    CLI::App* convert = app.add_subcommand(
        "convert", "Convert your own images (or, with `tokens`, text) into shards dtune reads.");
    convert->footer(
        "SRC is an ImageFolder tree (SRC/<class>/<image>; labels are the class folders in sorted "
        "order, as torchvision numbers them, listed in DST/classes.txt) or a flat folder of images "
        "(one class). JPEGs are kept byte for byte, PNGs transcoded to JPEG at --quality; the "
        "result is WebDataset shards (sample-N.jpg + sample-N.cls) with dataset.json beside them. "
        "Every file left out is counted by cause and named in the summary: damaged or unreadable "
        "files and folders, symlinks not followed (dangling, loops, to folders) and second links "
        "to a file already read. --out must lie outside SRC, and be empty or new unless "
        "--overwrite.");
    convert->require_subcommand(0, 1);
    convert->add_option("src", ci.src, "Source: a directory or s3://bucket/prefix.");
    convert->add_option("--out", ci.out, "Where the shards go: a directory or s3://bucket/prefix.");
    convert
        ->add_option(
            "--shard-mb", ci.shard_mb,
            "Largest shard in MiB: a shard is closed before an image would take it past this.")
        ->capture_default_str();
    convert
        ->add_option("--quality", ci.quality,
                     "JPEG quality (1-100) for the images transcoded from PNG.")
        ->capture_default_str();
    bool no_transcode = false;
    convert->add_flag("--no-transcode", no_transcode,
                      "Refuse PNGs instead of transcoding them (they are counted as skipped).");
    convert->add_option("--seed", ci.seed, "Seed of the sample order across shards.")
        ->capture_default_str();
    convert->add_flag("--overwrite", ci.overwrite,
                      "Write into an --out that already holds files (files of the same names are "
                      "replaced; default: refused).");
    convert->add_flag("--progress", convert_progress,
                      "Progress lines on stderr even when it is not a terminal.");
    CLI::App* convert_tokens = convert->add_subcommand(
        "tokens",
        "Text files (or folders of them, recursively) through the byte-level tokenizer into "
        "llm.c token shards with dataset.json; binary and empty files are skipped and named.");
    convert_tokens->add_option("src", ct.src, "Text files or directories.")->required();
    convert_tokens
        ->add_option("--out", ct.out, "Where the shards go: a directory or s3://bucket/prefix.")
        ->required();
    convert_tokens->add_option("--shard-tokens", ct.shard_tokens, "Tokens per shard.")
        ->capture_default_str();
    convert_tokens->add_flag("--overwrite", ct.overwrite,
                             "Write into an --out that already holds files (default: refused).");
    convert_tokens->add_flag("--progress", convert_progress,
                             "Progress lines on stderr even when it is not a terminal.");
    dd::MakeImagesOptions mi;
    dd::MakeTokensOptions mt;
    CLI::App* make =
        app.add_subcommand("make",
                           "Write a synthetic dataset (images or tokens) to try the loader.")
            ->require_subcommand(1);
    CLI::App* images = make->add_subcommand(
        "images",
        "Synthetic JPEGs with class structure as WebDataset shards (or an ImageFolder "
        "tree), with dataset.json.");
    images->add_option("--out", mi.out, "A directory or s3://bucket/prefix.")->required();
    images->add_option("--samples", mi.samples, "How many images.")->capture_default_str();
    images->add_option("--classes", mi.classes, "How many classes (labels 0..K-1, round robin).")
        ->capture_default_str();
    images
        ->add_option("--width", mi.width, "Image width in pixels (at most 65500, libjpeg's limit).")
        ->capture_default_str();
    images->add_option("--height", mi.height, "Image height in pixels (at most 65500).")
        ->capture_default_str();
    images
        ->add_option("--size-jitter", mi.size_jitter,
                     "Each side scaled by a random factor in [1-j, 1+j].")
        ->capture_default_str();
    images->add_option("--shard-samples", mi.shard_samples, "Images per shard.")
        ->capture_default_str();
    images->add_option("--quality", mi.quality, "JPEG quality, 1-100.")->capture_default_str();
    images->add_option("--seed", mi.seed, "The random seed.")->capture_default_str();
    images
        ->add_option("--layout", mi.layout,
                     "webdataset (tar shards) or imagefolder (one file per image).")
        ->capture_default_str()
        ->check(CLI::IsMember({"webdataset", "imagefolder"}));
    CLI::App* tokens = make->add_subcommand("tokens",
                                            "llm.c token shards (byte-level) from text files, with "
                                            "dataset.json.");
    tokens->add_option("--out", mt.out, "A directory or s3://bucket/prefix.")->required();
    tokens->add_option("--input", mt.inputs, "The text files.")->required();
    tokens->add_option("--shard-tokens", mt.shard_tokens, "Tokens per shard.")
        ->capture_default_str();
    tokens->add_option("--repeat", mt.repeat, "Concatenate the inputs this many times (for size).")
        ->capture_default_str();
    std::string index_url;
    CLI::App* index = app.add_subcommand("index",
                                         "Write dataset.json for the shards, token files or class "
                                         "folders under a directory or s3:// prefix.");
    index->add_option("url", index_url, "A directory or s3://bucket/prefix.")->required();
    dd::BenchOptions b;
    CLI::App* bench =
        app.add_subcommand("bench",
                           "Run the loader alone: samples/s and its time breakdown per "
                           "epoch, and a results file.");
    bench->add_option("url", b.url, "The dataset: a directory or s3://bucket/prefix.")->required();
    bench->add_option("--batch", b.loader.batch, "Samples per batch per rank.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench
        ->add_option("--workers", b.loader.workers, "Loader threads (0: in the consumer's thread).")
        ->capture_default_str()
        ->check(dtune::thread_count());
    bench->add_option("--prefetch", b.loader.prefetch, "Batches built ahead of the consumer.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench->add_option("--image-size", b.loader.image_size, "Side of the output images in pixels.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench
        ->add_option("--context", b.loader.context,
                     "Tokens per sample of a token dataset (the model's context length).")
        ->capture_default_str();
    bench->add_option("--seed", b.loader.seed, "Seed of the shuffling and the augmentation.")
        ->capture_default_str();
    bench->add_option("--epochs", b.epochs, "How many epochs.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench
        ->add_option("--max-batches", b.max_batches,
                     "Stop each epoch after this many batches (0: all).")
        ->capture_default_str();
    bench->add_flag("--strict", b.loader.strict, "A bad sample is an error instead of skipped.");
    bool keep_last = false;
    bench->add_flag("--keep-last", keep_last, "Also deliver the last, partial batch of each rank.");
    bool no_augment = false;
    bench->add_flag("--no-augment", no_augment,
                    "Resize + center crop instead of random-resized crop + flip.");
    std::string decode = "roi";
    bench
        ->add_option("--decode", decode,
                     "JPEG decoding: roi decodes only the rows and iMCU columns around the crop "
                     "box (the same tensors as full), full decodes the whole image then crops, "
                     "nvjpeg decodes on CUDA device 0 with nvJPEG (close to, not equal to, "
                     "libjpeg's pixels; refused without a GPU).")
        ->capture_default_str()
        ->check(CLI::IsMember({"roi", "full", "nvjpeg"}));
    bench->add_flag("--fast-decode", b.loader.fast_decode,
                    "Scale by 1/2, 1/4 or 1/8 in the inverse DCT where the crop box is at least "
                    "twice the output on both sides, as Pillow's draft mode (changes the pixels; "
                    "needs --decode roi).");
    bench->add_option("--dump-ids", b.dump_ids,
                      "Write the sample ids each rank got to FILE.rank<r>.");
    double cache_mb = 8192, cache_block_mb = 8;
    bench->add_option("--cache-dir", b.cache.dir,
                      "Node-local cache directory (a disk, or /dev/shm for memory), "
                      "shared by the ranks of a node (default: none).");
    bench
        ->add_option("--cache-mb", cache_mb,
                     "Cache capacity in MiB (least recently used blocks evicted).")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench->add_option("--cache-block-mb", cache_block_mb, "Cache block (the fetch unit) in MiB.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench
        ->add_option("--timeout", b.timeout_s,
                     "Seconds the ranks wait for each other at an epoch's "
                     "start and end before the job is aborted, naming what it waited for.")
        ->capture_default_str()
        ->check(dtune::kPositive);
    bench->add_option("--output", b.output,
                      "HDF5 results file [default: results/dtune-data-<time>-<pid>.h5, under "
                      "$DTUNE_RESULTS_DIR when set].");
    bool no_output = false;
    bench->add_flag("--no-output", no_output, "Write no HDF5 file.");
    bench->add_flag("--overwrite", b.overwrite,
                    "Replace an existing --output file (default: keep it and write NAME.1.h5, "
                    "NAME.2.h5, ...).");
    bench
        ->add_option("--dump-digests", b.dump_digests,
                     "Test only: write \"epoch id label digest\" of every delivered sample's "
                     "tensor to FILE.rank<r> (slows the epoch).")
        ->group("Testing");
    bench
        ->add_flag("--debug-same-slice", b.same_slice,
                   "Test only: every rank reads the whole epoch.")
        ->group("Testing");

    const int rc = dtune::parse_cli(app, a.argc, a.argv, a.ctx.is_root());
    if (rc >= 0) return rc;
    if (*convert_tokens) {
      ct.progress = convert_progress ? dtune::ProgressMode::kAlways : dtune::ProgressMode::kAuto;
      dd::convert_tokens(ct);
    } else if (*convert) {
      if (ci.src.empty() || ci.out.empty())
        throw dtune::UsageError("convert: give SRC and --out (dtune-data convert SRC --out DST)");
      ci.transcode = !no_transcode;
      ci.progress = convert_progress ? dtune::ProgressMode::kAlways : dtune::ProgressMode::kAuto;
      dd::convert_images(ci);
    } else if (*images) {
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
      b.loader.decode = dd::parse_decode_mode(decode);
      if (b.loader.fast_decode && b.loader.decode != dd::DecodeMode::kRoi)
        throw dtune::UsageError("--fast-decode scales the region decode: drop --decode " + decode);
      if (no_output && !b.output.empty())
        throw dtune::UsageError("--no-output and --output both given: keep one");
      const char* dir = std::getenv("DTUNE_RESULTS_DIR");
      if (!no_output && b.output.empty())
        b.output = dtune::default_results_path(dir ? dir : "results", "dtune-data");
      b.command_line = dtune::join_command_line(a.argc, a.argv);
      return dd::bench_loader(a.ctx, a.watchdog, b);
    }
    return 0;
  }));
}
