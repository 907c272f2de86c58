// Storage URLs and S3 settings: "s3://bucket/prefix" or a local directory ("file://" optional),
// and S3Options from the environment as the AWS CLI reads it. Also the key check that both
// backends share: keys are relative '/'-separated paths that cannot climb out of the root.
#include "data/storage/storage.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace dtune::data {
namespace detail {

// Shared by local_storage.cc and s3_storage.cc (declared there): rejects keys that are empty,
// absolute, or have empty, "." or ".." segments, so that no key escapes the root (a directory, or
// the prefix; curl would also collapse "/../" in an S3 URL).
void check_key(const std::string& key) {
  if (key.empty()) throw UsageError("storage key is empty");
  if (key.front() == '/')
    throw UsageError("storage key '" + key + "' must be relative (no leading '/')");
  if (key.find('\0') != std::string::npos) throw UsageError("storage key contains a NUL byte");
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t end = key.find('/', begin);
    if (end == std::string::npos) end = key.size();
    const std::string seg = key.substr(begin, end - begin);
    if (seg == "..")
      throw UsageError("storage key '" + key +
                       "' must not contain '..' (it would escape the root)");
    if (seg.empty() || seg == ".")
      throw UsageError("storage key '" + key + "' has an empty or '.' path segment");
    begin = end + 1;
  }
}

}  // namespace detail

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

double env_positive_double(const char* name, double fallback) {
  const std::string v = env_or(name, "");
  if (v.empty()) return fallback;
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || !(x > 0))
    throw UsageError(std::string(name) + "='" + v + "' must be a positive number of seconds");
  return x;
}

int env_count(const char* name, int fallback) {
  const std::string v = env_or(name, "");
  if (v.empty()) return fallback;
  size_t used = 0;
  long x = -1;
  try {
    x = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x < 0 || x > 100)
    throw UsageError(std::string(name) + "='" + v + "' must be an integer from 0 to 100");
  return static_cast<int>(x);
}

[[noreturn]] void malformed_s3(const std::string& url) {
  throw UsageError("malformed S3 URL '" + url + "': expected s3://bucket or s3://bucket/prefix");
}

bool valid_bucket_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

}  // namespace

S3Options S3Options::from_env() {
  S3Options o;
  o.region = env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", o.region));
  // AWS_ENDPOINT_URL_S3 is the service-specific override the AWS CLI and SDKs also honour.
  o.endpoint = env_or("AWS_ENDPOINT_URL_S3", env_or("AWS_ENDPOINT_URL", ""));
  if (o.endpoint.empty()) o.endpoint = "https://s3." + o.region + ".amazonaws.com";
  if (o.endpoint.rfind("http://", 0) != 0 && o.endpoint.rfind("https://", 0) != 0)
    throw UsageError("AWS_ENDPOINT_URL='" + o.endpoint +
                     "' must start with http:// or https:// (e.g. http://127.0.0.1:9000)");
  while (o.endpoint.size() > 8 && o.endpoint.back() == '/') o.endpoint.pop_back();
  o.access_key = env_or("AWS_ACCESS_KEY_ID", "");
  o.secret_key = env_or("AWS_SECRET_ACCESS_KEY", "");
  o.session_token = env_or("AWS_SESSION_TOKEN", "");
  if (o.access_key.empty() || o.secret_key.empty()) {
    std::string missing = o.access_key.empty() ? "AWS_ACCESS_KEY_ID" : "";
    if (o.secret_key.empty())
      missing += std::string(missing.empty() ? "" : " and ") + "AWS_SECRET_ACCESS_KEY";
    throw UsageError("S3 credentials missing: set " + missing +
                     " (and AWS_SESSION_TOKEN for temporary credentials)");
  }
  o.timeout_s = env_positive_double("DTUNE_S3_TIMEOUT_S", o.timeout_s);
  o.retries = env_count("DTUNE_S3_RETRIES", o.retries);
  return o;
}

std::unique_ptr<Storage> open_storage(const std::string& url) {
  if (url.empty())
    throw UsageError("storage URL is empty: expected a directory or s3://bucket/prefix");
  if (url.rfind("s3://", 0) == 0) {
    const std::string rest = url.substr(5);
    const size_t slash = rest.find('/');
    const std::string bucket = rest.substr(0, slash);
    if (bucket.empty() || bucket.size() > 63) malformed_s3(url);
    for (char c : bucket)
      if (!valid_bucket_char(c)) malformed_s3(url);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (!prefix.empty()) {
      try {
        detail::check_key(prefix);
      } catch (const UsageError&) {
        malformed_s3(url);
      }
    }
    return open_s3_storage(bucket, prefix, S3Options::from_env());
  }
  if (url.rfind("file:", 0) == 0) {
    // "file:///abs/dir" (RFC 8089) or "file:/abs/dir" (what describe() prints); no remote hosts.
    std::string path = url.substr(5);
    if (path.rfind("//", 0) == 0) path = path.substr(2);
    if (path.empty() || path.front() != '/')
      throw UsageError("malformed file URL '" + url + "': expected file:///absolute/dir");
    return open_local_storage(path);
  }
  const size_t scheme = url.find("://");
  if (scheme != std::string::npos && url.find('/') > scheme)
    throw UsageError("unsupported storage URL '" + url +
                     "': expected a directory, file:///dir or s3://bucket/prefix");
  return open_local_storage(url);
}

}  // namespace dtune::data
