// What dtune must not write down verbatim: secrets in recorded environment variables (a Slurm JWT,
// a password, an access key) and the user-info of URLs (s3://user:pass@host). Names are kept, so
// a reader still sees that a variable was set; only values are hidden.
#pragma once

#include <string>

namespace dtune {

inline constexpr const char* kRedacted = "<redacted>";

// True for a variable whose value is a credential: its name contains TOKEN, SECRET, PASSWORD,
// PASSWD, KEY, CREDENTIAL or JWT (case-insensitive), e.g. SLURM_JWT, AWS_SECRET_ACCESS_KEY,
// DTUNE_S3_PASSWORD.
bool is_secret_name(const std::string& name);

// Every `scheme://user[:password]@` in `text` loses its `user[:password]@`.
std::string strip_url_userinfo(const std::string& text);

// The value to record for environment variable `name`: kRedacted for a secret name, else the value
// with URL user-info stripped.
std::string recordable_env_value(const std::string& name, const std::string& value);

}  // namespace dtune
