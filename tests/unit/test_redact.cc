// Provenance redaction: secret variables keep their names but lose their values; URLs lose their
// user-info wherever they appear in a value or a command line.
#include <gtest/gtest.h>

#include "core/redact.h"

namespace dtune {
namespace {

TEST(Redact, SecretNames) {
  for (const char* n :
       {"SLURM_JWT", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
        "DTUNE_S3_PASSWORD", "db_passwd", "MY_CREDENTIALS", "OMPI_MCA_api_key"})
    EXPECT_TRUE(is_secret_name(n)) << n;
  for (const char* n : {"NCCL_ALGO", "NCCL_PROTO", "OMPI_MCA_btl", "SLURM_JOB_ID", "UCX_TLS",
                        "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "SLURM_NTASKS"})
    EXPECT_FALSE(is_secret_name(n)) << n;
}

TEST(Redact, EnvValues) {
  EXPECT_EQ(recordable_env_value("SLURM_JWT", "eyJhbGciOi.x.y"), kRedacted);
  EXPECT_EQ(recordable_env_value("NCCL_ALGO", "Ring"), "Ring");
  EXPECT_EQ(recordable_env_value("DTUNE_TRAIN_DATA", "s3://alice:s3cr3t@minio:9000/bucket/x"),
            "s3://minio:9000/bucket/x");
}

TEST(Redact, UrlUserInfo) {
  EXPECT_EQ(strip_url_userinfo("http://user:pass@host:9000/b"), "http://host:9000/b");
  EXPECT_EQ(strip_url_userinfo("https://u@h"), "https://h");
  EXPECT_EQ(strip_url_userinfo("--data s3://k:s@h/p --x http://a:b@c:1?q=@"),
            "--data s3://h/p --x http://c:1?q=@");
  // An '@' after the authority (in a path or query) is not user-info.
  EXPECT_EQ(strip_url_userinfo("http://host/path@x"), "http://host/path@x");
  EXPECT_EQ(strip_url_userinfo("no url @ here"), "no url @ here");
  EXPECT_EQ(strip_url_userinfo("a://"), "a://");
  EXPECT_EQ(strip_url_userinfo(""), "");
}

}  // namespace
}  // namespace dtune
