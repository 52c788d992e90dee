#include "storage/place.h"

#include <cstdlib>

#include "storage/dir_store.h"
#include "storage/local_files.h"
#include "storage/uri.h"
#include "util/fd.h"
#include "util/text.h"

namespace cohort::storage {

namespace {

constexpr const char* kSiteVariable = "COHORT_STORE";

std::string env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? v : "";
}

// A bucket of the store kept in S3: the keys under "<prefix>" of one S3 bucket, named
// store://BUCKET/KEY (also in the errors of the S3 store below it).
class BucketInS3 final : public ObjectStore {
 public:
  BucketInS3(std::unique_ptr<ObjectStore> s3, std::string prefix, std::string name)
      : s3_(std::move(s3)), prefix_(std::move(prefix)), name_(std::move(name)) {}

  std::string uri(const std::string& key) const override {
    return name_ + (key.empty() ? "" : "/" + key);
  }

  Result<std::vector<ObjectInfo>> list(const std::string& prefix) override {
    if (!prefix.empty() &&
        !containedPath(endsWith(prefix, '/') ? prefix.substr(0, prefix.size() - 1) : prefix)) {
      return badKey(prefix);
    }
    auto listed = s3_->list(prefix_ + prefix);
    if (!listed) return renamed(listed.error());
    for (ObjectInfo& o : *listed) o.key = o.key.substr(prefix_.size());
    return listed;
  }

  Result<ObjectInfo> head(const std::string& key) override {
    if (!containedPath(key)) return badKey(key);
    auto found = s3_->head(prefix_ + key);
    if (!found) return renamed(found.error());
    found->key = key;
    return found;
  }

  Result<Fetched> getRange(const std::string& key, int fd, int64_t offset,
                           int64_t length) override {
    if (!containedPath(key)) return badKey(key);
    auto got = s3_->getRange(prefix_ + key, fd, offset, length);
    if (!got) return renamed(got.error());
    return got;
  }

  Result<std::string> etagOf(int fd, int64_t size) const override { return s3_->etagOf(fd, size); }
  bool checkable(const ObjectInfo& object) const override { return s3_->checkable(object); }

  Result<std::string> put(const std::string& key, int fd, int64_t size,
                          const std::atomic<bool>* cancel, const PartDone& sent) override {
    if (!containedPath(key)) return badKey(key);
    auto stored = s3_->put(prefix_ + key, fd, size, cancel, sent);
    if (!stored) return renamed(stored.error());
    return stored;
  }

  Result<std::optional<std::string>> copyIn(ObjectStore& from, const ObjectInfo& object,
                                            const std::string& key, const std::atomic<bool>* cancel,
                                            const PartDone& copied) override {
    if (!containedPath(key)) return badKey(key);
    ObjectStore* source = &from;
    ObjectInfo at = object;
    if (auto* bucket = dynamic_cast<BucketInS3*>(&from)) {
      source = bucket->s3_.get();
      at.key = bucket->prefix_ + object.key;
    }
    auto copiedIn = s3_->copyIn(*source, at, prefix_ + key, cancel, copied);
    if (!copiedIn) return renamed(copiedIn.error());
    return copiedIn;
  }

 private:
  static bool endsWith(const std::string& s, char c) { return !s.empty() && s.back() == c; }

  tl::unexpected<Error> badKey(const std::string& key) const {
    return fail(Code::kInvalidArgument,
                uri(key) +
                    ": a store path has no empty, '.' or '..' parts and no name starting "
                    "with '" +
                    std::string(kTmpPrefix) + "'");
  }

  // The S3 store's error, naming store:// paths rather than where they are kept.
  tl::unexpected<Error> renamed(Error e) const {
    const std::string below = s3_->uri(prefix_.substr(0, prefix_.size() - 1));
    for (size_t at; (at = e.message.find(below)) != std::string::npos;) {
      e.message.replace(at, below.size(), name_);
    }
    return tl::unexpected<Error>(std::move(e));
  }

  std::unique_ptr<ObjectStore> s3_;
  const std::string prefix_;  // "<site prefix>BUCKET/"
  const std::string name_;    // "store://BUCKET"
};

struct SiteVariable {
  const char* suffix;
  std::string S3Config::*field;
};
constexpr SiteVariable kSiteFields[] = {
    {"_ENDPOINT", &S3Config::endpoint},
    {"_REGION", &S3Config::region},
    {"_CA_BUNDLE", &S3Config::ca_bundle},
    {"_ACCESS_KEY_ID", &S3Config::access_key},
    {"_SECRET_ACCESS_KEY", &S3Config::secret_key},
    {"_SESSION_TOKEN", &S3Config::session_token},
};

// s3://BUCKET[/PREFIX] as a site without its configuration.
Result<StoreSite> siteAt(const std::string& uri) {
  COHORT_ASSIGN(S3Uri at, parseS3Uri(uri));
  StoreSite site;
  site.s3_bucket = at.bucket;
  site.s3_prefix = at.key;
  if (!site.s3_prefix.empty() && site.s3_prefix.back() != '/') site.s3_prefix += '/';
  return site;
}

}  // namespace

std::string StoreSite::describe() const {
  if (!inS3()) return dir;
  std::string prefix = s3_prefix;
  if (!prefix.empty()) prefix.pop_back();
  return "s3://" + s3_bucket + (prefix.empty() ? "" : "/" + prefix);
}

Result<StoreSite> storeSite(const std::string& data_root) {
  if (const std::string uri = env(kSiteVariable); !uri.empty()) {
    auto site = siteAt(uri);
    if (!site) return withContext(site.error(), kSiteVariable);
    for (const SiteVariable& v : kSiteFields) {
      const std::string value = env(std::string(kSiteVariable) + v.suffix);
      if (!value.empty()) site->s3.*v.field = value;
    }
    if (site->s3.access_key.empty() || site->s3.secret_key.empty()) {
      return fail(Code::kUnauthenticated, std::string(kSiteVariable) +
                                              " names a store in S3 without its credentials (" +
                                              kSiteVariable + "_ACCESS_KEY_ID and " +
                                              kSiteVariable + "_SECRET_ACCESS_KEY)");
    }
    return site;
  }
  if (data_root.empty() || data_root[0] != '/') {
    return fail(Code::kInvalidArgument,
                "the data root '" + data_root + "' is not an absolute path");
  }
  StoreSite site;
  site.dir = (data_root == "/" ? "" : data_root) + "/store";
  return site;
}

Result<StoreSite> s3StoreSite(const std::string& uri) {
  COHORT_ASSIGN(StoreSite site, siteAt(uri));
  COHORT_ASSIGN(site.s3, s3ConfigFromEnvironment());
  return site;
}

Result<void> checkSite(const StoreSite& site) {
  if (!site.inS3()) return makeDirs(site.dir);
  return probeS3(site.s3, site.s3_bucket, site.s3_prefix);
}

std::vector<std::pair<std::string, std::string>> siteVariables(const StoreSite& site) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!site.inS3()) return out;
  out.emplace_back(kSiteVariable, site.describe());
  for (const SiteVariable& v : kSiteFields) {
    if (!(site.s3.*v.field).empty()) {
      out.emplace_back(std::string(kSiteVariable) + v.suffix, site.s3.*v.field);
    }
  }
  return out;
}

bool isSiteVariable(std::string_view name) { return startsWith(name, kSiteVariable); }

std::vector<std::string> siteVariableNames() {
  std::vector<std::string> names = {kSiteVariable};
  for (const SiteVariable& v : kSiteFields) names.push_back(std::string(kSiteVariable) + v.suffix);
  return names;
}

Result<std::unique_ptr<ObjectStore>> openBucket(const StoreSite& site, const std::string& dir,
                                                const std::string& name) {
  if (!validStoreDirName(dir)) {
    return fail(Code::kInvalidArgument, storeUri(dir, "") + ": not a valid bucket name");
  }
  const std::string uri = name.empty() ? storeUri(dir, "") : name;
  if (!site.inS3()) return makeDirStore(site.dir + "/" + dir, uri);
  COHORT_ASSIGN(auto s3, makeS3Store(site.s3, site.s3_bucket));
  return std::unique_ptr<ObjectStore>(
      std::make_unique<BucketInS3>(std::move(s3), site.s3_prefix + dir + "/", uri));
}

Result<Place> openPlace(const std::string& uri, const std::string& data_root,
                        const std::string& cwd) {
  Place place;
  if (isS3Uri(uri)) {
    COHORT_ASSIGN(S3Uri at, parseS3Uri(uri));
    COHORT_ASSIGN(place.store, openS3(at));
    place.key = at.key;
    return place;
  }
  COHORT_ASSIGN(Location where, parseLocation(uri));
  if (where.kind == Location::Kind::kStore) {
    COHORT_ASSIGN(StoreSite site, storeSite(data_root));
    if (site.inS3()) {
      COHORT_ASSIGN(place.store, openBucket(site, storeDirName(where.owner, where.bucket)));
      place.key = where.key + (where.trailing_slash && !where.key.empty() ? "/" : "");
      return place;
    }
  }
  COHORT_ASSIGN(place.path, resolve(uri, data_root, cwd));
  return place;
}

}  // namespace cohort::storage
