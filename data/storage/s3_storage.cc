// The S3 backend: an S3-compatible client (AWS S3, MinIO, Alluxio's S3 endpoint, moto) over
// libcurl's easy interface, signed with curl's own AWS SigV4 (CURLOPT_AWS_SIGV4). One easy handle
// per thread, reset before each request, so the loader's threads never share a handle but each
// keeps its connection alive across requests. Path-style URLs: <endpoint>/<bucket>/<prefix/key>.
// Transient failures (connection errors, timeouts, HTTP 5xx and 429) are retried with exponential
// backoff, 100 ms x 2^attempt scaled by a random factor in [0.5, 1.5) so loaders do not retry in
// step.
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/redact.h"
#include "data/storage/storage.h"

namespace dtune::data {
namespace detail {
void check_key(const std::string& key);  // storage.cc
}  // namespace detail

namespace {

constexpr double kBackoffBaseS = 0.1;
constexpr long kMaxConnectTimeoutMs = 10000;
constexpr const char* kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

void global_init_once() {
  // A function-local static is initialised exactly once even when many threads arrive together.
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK)
    throw Error(std::string("curl_global_init failed: ") + curl_easy_strerror(rc));
}

// This thread's easy handle: created on first use, reset (which keeps its live connections and DNS
// cache) before every request, cleaned up when the thread exits.
CURL* thread_handle() {
  struct Handle {
    CURL* curl = nullptr;
    ~Handle() {
      if (curl != nullptr) curl_easy_cleanup(curl);
    }
  };
  thread_local Handle h;
  if (h.curl == nullptr) {
    h.curl = curl_easy_init();
    if (h.curl == nullptr) throw Error("curl_easy_init failed");
  } else {
    curl_easy_reset(h.curl);
  }
  return h.curl;
}

class HeaderList {
 public:
  HeaderList() = default;
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  ~HeaderList() { curl_slist_free_all(list_); }
  void add(const std::string& h) {
    curl_slist* next = curl_slist_append(list_, h.c_str());
    if (next == nullptr) throw Error("curl_slist_append failed");
    list_ = next;
  }
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

size_t append_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// SigV4's URI encoding: everything but the unreserved characters as %XX (upper-case hex), '/' kept
// in paths and encoded in query values. Pre-encoded this way, the URL curl signs is canonical.
std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// The five predefined XML entities and numeric character references (as UTF-8).
std::string xml_unescape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) throw Error("malformed XML entity in S3 response: " + s);
    const std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out.push_back('&');
    else if (ent == "lt")
      out.push_back('<');
    else if (ent == "gt")
      out.push_back('>');
    else if (ent == "quot")
      out.push_back('"');
    else if (ent == "apos")
      out.push_back('\'');
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      unsigned long cp = 0;
      try {
        cp = std::stoul(ent.substr(hex ? 2 : 1), nullptr, hex ? 16 : 10);
      } catch (const std::exception&) {
        throw Error("malformed XML character reference &" + ent + "; in S3 response");
      }
      if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    } else {
      throw Error("unknown XML entity &" + ent + "; in S3 response");
    }
    i = semi;
  }
  return out;
}

// The raw text of the next <tag>...</tag> at or after `pos` (advanced past it). S3's responses are
// flat enough that this small scanner is all the XML parsing the client needs.
bool next_element(const std::string& xml, const std::string& tag, size_t& pos, std::string& out) {
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  const size_t a = xml.find(open, pos);
  if (a == std::string::npos) return false;
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string::npos) return false;
  out = xml.substr(a + open.size(), b - a - open.size());
  pos = b + close.size();
  return true;
}

std::string element_text(const std::string& xml, const std::string& tag) {
  size_t pos = 0;
  std::string raw;
  return next_element(xml, tag, pos, raw) ? xml_unescape(raw) : std::string();
}

bool retryable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

struct Request {
  const char* method = "GET";  // GET, HEAD or PUT
  std::string target;          // "/bucket/key?query", already URI-encoded
  std::string range;           // "bytes=a-b" or empty
  const std::string* upload = nullptr;
};

struct Response {
  CURLcode curl = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::string body;
  int64_t content_length = -1;
  int attempts = 0;
};

class S3Storage final : public Storage {
 public:
  S3Storage(std::string bucket, std::string prefix, S3Options o)
      : bucket_(std::move(bucket)), prefix_(std::move(prefix)), o_(std::move(o)) {
    sigv4_ = "aws:amz:" + o_.region + ":s3";
  }

  std::string describe() const override {
    const std::string p = prefix_.empty() ? "" : "/" + prefix_.substr(0, prefix_.size() - 1);
    return "s3://" + bucket_ + p + " (endpoint " + strip_url_userinfo(o_.endpoint) + ")";
  }

  // Opening checks that the bucket exists and the credentials work, with a one-key listing rather
  // than HEAD bucket because only a GET returns S3's <Code>/<Message> explaining a refusal.
  void probe() {
    Request r;
    r.target = "/" + bucket_ + "?list-type=2&max-keys=1&prefix=" + uri_encode(prefix_, false);
    Response resp = perform(r);
    if (resp.curl == CURLE_OK && resp.status == 404)
      throw NotFound("s3 bucket '" + bucket_ + "' does not exist at " +
                     strip_url_userinfo(o_.endpoint));
    check(resp, "listing s3://" + bucket_ + "/" + prefix_);
  }

  std::string read(const std::string& key, int64_t offset, int64_t length) override {
    if (offset < 0)
      throw UsageError("read of '" + key + "': negative offset " + std::to_string(offset));
    Request r;
    r.target = object_target(key);
    if (length == 0) {  // nothing to fetch, but a missing key is still NotFound
      size(key);
      return {};
    }
    if (offset > 0 || length > 0)
      r.range = "bytes=" + std::to_string(offset) + "-" +
                (length > 0 ? std::to_string(offset + length - 1) : std::string());
    Response resp = perform(r);
    // 416: the offset is at or past the end of the object (or the object is empty).
    if (resp.curl == CURLE_OK && resp.status == 416) return {};
    check(resp, "reading " + url_of(key));
    std::string out = std::move(resp.body);
    if (resp.status == 200 && !r.range.empty()) {  // a server that ignored Range sent it all
      out = offset < static_cast<int64_t>(out.size()) ? out.substr(offset) : std::string();
    }
    if (length > 0 && static_cast<int64_t>(out.size()) > length) out.resize(length);
    bytes_.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
    return out;
  }

  int64_t size(const std::string& key) override {
    Request r;
    r.method = "HEAD";
    r.target = object_target(key);
    Response resp = perform(r);
    check(resp, "HEAD of " + url_of(key));
    if (resp.content_length < 0)
      throw Error("S3 HEAD of " + url_of(key) + " returned no Content-Length");
    return resp.content_length;
  }

  std::vector<ObjectInfo> list() override {
    std::vector<ObjectInfo> out;
    std::string token;
    bool truncated = false;
    do {
      // Query parameters in SigV4's canonical (sorted) order.
      Request r;
      r.target = "/" + bucket_ + "?";
      if (!token.empty()) r.target += "continuation-token=" + uri_encode(token, false) + "&";
      r.target += "list-type=2&prefix=" + uri_encode(prefix_, false);
      Response resp = perform(r);
      check(resp, "listing s3://" + bucket_ + "/" + prefix_);
      size_t pos = 0;
      std::string block;
      while (next_element(resp.body, "Contents", pos, block)) {
        std::string key = element_text(block, "Key");
        const std::string size_text = element_text(block, "Size");
        if (key.compare(0, prefix_.size(), prefix_) != 0) continue;
        key.erase(0, prefix_.size());
        if (key.empty() || key.back() == '/') continue;  // "directory" marker objects
        int64_t sz = 0;
        try {
          sz = std::stoll(size_text);
        } catch (const std::exception&) {
          throw Error("S3 listing of s3://" + bucket_ + ": bad <Size> '" + size_text + "' for " +
                      key);
        }
        out.push_back({std::move(key), sz});
      }
      truncated = element_text(resp.body, "IsTruncated") == "true";
      token = element_text(resp.body, "NextContinuationToken");
      if (truncated && token.empty())
        throw Error("S3 listing of s3://" + bucket_ +
                    " is truncated but has no NextContinuationToken");
    } while (truncated);
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  void write(const std::string& key, const std::string& bytes) override {
    Request r;
    r.method = "PUT";
    r.target = object_target(key);
    r.upload = &bytes;
    check(perform(r), "writing " + url_of(key));
  }

  StorageStats stats() const override {
    StorageStats s;
    s.requests = requests_.load(std::memory_order_relaxed);
    s.bytes = bytes_.load(std::memory_order_relaxed);
    s.retries = retries_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::string object_target(const std::string& key) const {
    detail::check_key(key);
    return "/" + bucket_ + "/" + uri_encode(prefix_ + key, true);
  }
  std::string url_of(const std::string& key) const {
    return "s3://" + bucket_ + "/" + prefix_ + key;
  }

  // One HTTP exchange, no retries, no interpretation of the status.
  Response perform_once(const Request& r) const {
    CURL* h = thread_handle();
    Response resp;
    char errbuf[CURL_ERROR_SIZE] = {0};
    const std::string url = o_.endpoint + r.target;
    HeaderList headers;
    if (!r.range.empty()) headers.add("Range: " + r.range);
    if (!o_.session_token.empty()) headers.add("x-amz-security-token: " + o_.session_token);
    // S3 wants the payload hash in x-amz-content-sha256; curl 7.88 signs with the value given here
    // (newer curls would compute it). GET and HEAD send no body: the hash of "". A PUT is signed
    // as UNSIGNED-PAYLOAD (accepted by AWS, MinIO and moto) to spare a SHA-256 pass over a shard.
    headers.add(std::string("x-amz-content-sha256: ") +
                (r.upload != nullptr ? "UNSIGNED-PAYLOAD" : kEmptySha256));
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // required with threads: no SIGALRM for timeouts
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    // USERNAME/PASSWORD rather than USERPWD "a:s": a secret may itself contain ':'.
    curl_easy_setopt(h, CURLOPT_USERNAME, o_.access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, o_.secret_key.c_str());
    const long timeout_ms = std::max(1L, static_cast<long>(o_.timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms, kMaxConnectTimeoutMs));
    curl_easy_setopt(h, CURLOPT_USERAGENT, "dtune-storage");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp.body);
    if (std::string(r.method) == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (std::string(r.method) == "PUT") {
      // POSTFIELDS + a PUT verb: the body is sent from memory without a read callback.
      headers.add("Content-Type: application/octet-stream");
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.upload->size()));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.upload->data());
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
    resp.curl = curl_easy_perform(h);
    // The handle outlives this frame: drop its pointers to errbuf and headers now.
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
    if (resp.curl != CURLE_OK) {
      resp.curl_error = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(resp.curl);
      return resp;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
    curl_off_t len = -1;
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    resp.content_length = static_cast<int64_t>(len);
    return resp;
  }

  // perform_once() with the retries: returns the first non-transient answer or the last one.
  Response perform(const Request& r) {
    for (int attempt = 0;; ++attempt) {
      requests_.fetch_add(1, std::memory_order_relaxed);
      Response resp = perform_once(r);
      resp.attempts = attempt + 1;
      const bool transient =
          resp.curl != CURLE_OK ? retryable(resp.curl) : (resp.status >= 500 || resp.status == 429);
      if (!transient || attempt >= o_.retries) return resp;
      retries_.fetch_add(1, std::memory_order_relaxed);
      thread_local std::mt19937 rng{std::random_device{}()};
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      const double delay_s =
          kBackoffBaseS * static_cast<double>(1LL << std::min(attempt, 20)) * jitter(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    }
  }

  // Turns a failed response into the exception the interface promises.
  void check(const Response& resp, const std::string& what) const {
    const std::string tries =
        resp.attempts > 1 ? " (after " + std::to_string(resp.attempts) + " attempts)" : "";
    if (resp.curl == CURLE_OK && resp.status >= 200 && resp.status < 300) return;
    if (resp.curl == CURLE_OPERATION_TIMEDOUT)
      throw TimeoutError("S3 " + what + " at " + strip_url_userinfo(o_.endpoint) + " timed out: " +
                         resp.curl_error + " (DTUNE_S3_TIMEOUT_S=" + std::to_string(o_.timeout_s) +
                         " per request)" + tries);
    if (resp.curl != CURLE_OK)
      throw Error("S3 " + what + " at " + strip_url_userinfo(o_.endpoint) +
                  " failed: " + resp.curl_error + tries);
    const std::string code = element_text(resp.body, "Code");
    const std::string message = element_text(resp.body, "Message");
    std::string detail = "HTTP " + std::to_string(resp.status);
    if (!code.empty()) detail += " " + code;
    if (!message.empty()) detail += ": " + message;
    if (resp.status == 404) {
      if (code == "NoSuchBucket")
        throw NotFound("s3 bucket '" + bucket_ + "' does not exist at " +
                       strip_url_userinfo(o_.endpoint));
      throw NotFound("S3 " + what + ": no such key (" + detail + ")");
    }
    // S3 answers a bad session token with 400 InvalidToken, everything else about keys with 403.
    const bool auth_code = code == "InvalidToken" || code == "ExpiredToken" ||
                           code == "AuthorizationHeaderMalformed" || code == "InvalidAccessKeyId";
    if (resp.status == 401 || resp.status == 403 || auth_code)
      throw Error("S3 " + what + " at " + strip_url_userinfo(o_.endpoint) +
                  ": the credentials were rejected (" + detail +
                  "); check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN" +
                  " and AWS_REGION (now '" + o_.region + "')");
    throw Error("S3 " + what + " at " + strip_url_userinfo(o_.endpoint) + " failed: " + detail +
                tries);
  }

  std::string bucket_, prefix_;  // prefix_ is "" or ends with '/'
  S3Options o_;
  std::string sigv4_;
  std::atomic<int64_t> requests_{0}, bytes_{0}, retries_{0};
};

}  // namespace

std::unique_ptr<Storage> open_s3_storage(const std::string& bucket, const std::string& prefix,
                                         const S3Options& o) {
  if (bucket.empty() || bucket.find('/') != std::string::npos)
    throw UsageError("S3 bucket name '" + bucket + "' is empty or contains '/'");
  if (o.access_key.empty() || o.secret_key.empty())
    throw UsageError("S3 credentials missing: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  std::string p = prefix;
  while (!p.empty() && p.front() == '/') p.erase(0, 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (!p.empty()) {
    detail::check_key(p);
    p += '/';
  }
  S3Options opts = o;
  if (opts.region.empty()) opts.region = "us-east-1";
  if (opts.endpoint.empty()) opts.endpoint = "https://s3." + opts.region + ".amazonaws.com";
  while (opts.endpoint.size() > 8 && opts.endpoint.back() == '/') opts.endpoint.pop_back();
  if (!(opts.timeout_s > 0)) throw UsageError("S3 timeout must be positive seconds");
  if (opts.retries < 0) throw UsageError("S3 retries must be >= 0");
  global_init_once();
  auto s = std::make_unique<S3Storage>(bucket, p, std::move(opts));
  s->probe();
  return s;
}

}  // namespace dtune::data
