// Where dataset bytes live, behind one interface: local files (also NFS, Lustre, an Alluxio FUSE
// mount: anything POSIX) and S3-compatible object storage over HTTP (AWS S3, MinIO, Alluxio's S3
// endpoint, moto in the tests), signed with curl's own AWS SigV4. Keys are '/'-separated paths
// relative to the storage root (a directory, or s3://bucket/prefix). Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace dtune::data {

struct ObjectInfo {
  std::string key;  // relative to the root
  int64_t size_bytes = 0;
};

// An entry under the root that a listing leaves out, and why: "unreadable folder: Permission
// denied", "dangling symlink (to T)", "symlink loop", "symlink to a folder (not followed)", "not a
// regular file", "duplicate: a symlink to K, listed already (a file is read once)".
struct LeftOut {
  std::string key, reason;
};

struct StorageStats {
  int64_t requests = 0, bytes = 0, retries = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // "file:/abs/dir" or "s3://bucket/prefix (endpoint http://...)": for messages and provenance.
  virtual std::string describe() const = 0;
  // `length` bytes from `offset` (length < 0: to the end). A short object gives a short read
  // (never an error); a missing key throws NotFound; anything else that fails after the retries
  // throws dtune::Error naming the key and the cause.
  virtual std::string read(const std::string& key, int64_t offset = 0, int64_t length = -1) = 0;
  virtual int64_t size(const std::string& key) = 0;  // throws NotFound
  // Every object under the root (recursively), sorted by key. A local root: files reached through a
  // symlink are listed under the link's key, each file once (the real file, else its first link by
  // key); folders that cannot be read and entries that are not files are left out.
  virtual std::vector<ObjectInfo> list() = 0;
  // The same, and what was left out and why, sorted by key (object stores leave nothing out).
  virtual std::vector<ObjectInfo> list_noting(std::vector<LeftOut>& left_out) {
    left_out.clear();
    return list();
  }
  // Creates or replaces an object (dtune-data make); parent "directories" as needed.
  virtual void write(const std::string& key, const std::string& bytes) = 0;
  // Thread-safe counters since creation: requests made (reads, sizes, lists, writes), payload bytes
  // read, retries after transient failures.
  virtual StorageStats stats() const = 0;
};

// A key or the root itself does not exist (also: an S3 bucket that does not exist). The user named
// it, so it is a usage error (exit 2) wherever it is not caught, as a missing --data is in every
// dtune binary.
struct NotFound : UsageError {
  using UsageError::UsageError;
};

// S3 settings, from the environment as the AWS CLI reads it: AWS_ENDPOINT_URL (default
// https://s3.<region>.amazonaws.com), AWS_REGION or AWS_DEFAULT_REGION (default us-east-1),
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; DTUNE_S3_TIMEOUT_S (default 30, per
// request), DTUNE_S3_RETRIES (default 4, exponential backoff from 100 ms with jitter, on
// connection errors, timeouts, 5xx and 429). Path-style addressing (endpoint/bucket/key), which
// MinIO, Alluxio and moto need and AWS accepts.
struct S3Options {
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key, secret_key, session_token;
  double timeout_s = 30;
  int retries = 4;
  static S3Options from_env();
};

// "s3://bucket/prefix" (S3Options::from_env()) or a local directory path ("file://" optional).
// Throws NotFound when the directory or bucket does not exist, UsageError for a malformed URL
// or missing S3 credentials.
std::unique_ptr<Storage> open_storage(const std::string& url);
std::unique_ptr<Storage> open_local_storage(const std::string& dir);
std::unique_ptr<Storage> open_s3_storage(const std::string& bucket, const std::string& prefix,
                                         const S3Options& o);

}  // namespace dtune::data
