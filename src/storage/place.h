// Where the data a URI names is, for the code that moves it (`cohort cp`, staging, outputs, the
// server's store): a local path, or a key in an object store (storage/object_store.h).
//  - s3://BUCKET/KEY: an S3-compatible service, configured as AWS's tools are (storage/s3.h).
//  - store://[OWNER@]BUCKET/KEY: the embedded store of a data root, its StoreSite: a directory
//    tree, <data-root>/store/DIR/KEY (DIR is "[OWNER@]BUCKET"), which is a local path
//    (storage/uri.h); or, for the server started with `--store s3://B/P` and the cohort
//    processes of its jobs, the objects "P/DIR/KEY" of the S3 bucket B, with the server's
//    credentials.
//  - anything else: a local path (storage/uri.h).
// The server hands its site to the coordinators and node agents of its jobs in their
// environment (siteVariables: COHORT_STORE and COHORT_STORE_*); a node agent never passes those
// to the ranks. Thread-safe, except that storeSite reads the environment.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/object_store.h"
#include "storage/s3.h"
#include "util/result.h"

namespace cohort::storage {

struct StoreSite {
  std::string dir;  // on disk: <data-root>/store; "" when the store is in S3
  // In S3: every store bucket NAME is the prefix "<s3_prefix>NAME/" of the bucket s3_bucket.
  std::string s3_bucket;
  std::string s3_prefix;  // "" or ending in '/'
  S3Config s3;

  bool inS3() const { return dir.empty(); }
  // "s3://B/P" or the directory, for messages (never a credential).
  std::string describe() const;
};

// The store of `data_root` (an absolute path) for this process: the site in COHORT_STORE and
// COHORT_STORE_* when they are set (a cohort process of a server job), else the directory
// <data_root>/store. Errors: kInvalidArgument (COHORT_STORE is not s3://BUCKET[/PREFIX], a
// relative data root), kUnauthenticated (COHORT_STORE without its credentials).
Result<StoreSite> storeSite(const std::string& data_root);

// A store in S3 at `uri` ("s3://BUCKET" or "s3://BUCKET/PREFIX"), reached with the credentials,
// region and endpoint of this process's environment (s3ConfigFromEnvironment). Errors: those of
// parseS3Uri and s3ConfigFromEnvironment.
Result<StoreSite> s3StoreSite(const std::string& uri);

// Whether the site can be used: on disk always (its directory is made); in S3, one listing of
// its prefix (probeS3). Errors: those of probeS3 and makeDirs.
Result<void> checkSite(const StoreSite& site);

// The variables that hand `site` to a child process (COHORT_STORE=s3://B/P and COHORT_STORE_*
// with its endpoint, region, CA bundle and credentials); none for a store on disk.
std::vector<std::pair<std::string, std::string>> siteVariables(const StoreSite& site);
// Whether `name` is one of the variables siteVariables sets (what a rank must never see).
bool isSiteVariable(std::string_view name);
// Every name siteVariables may set, always in the same order: what a manifest passes through
// from where it keeps them (a Kubernetes Secret).
std::vector<std::string> siteVariableNames();

// The bucket whose directory in the site is `dir` ("BUCKET" or "OWNER@BUCKET", storage/uri.h's
// storeDirName) as an object store: its keys are the bucket's paths, its URIs "NAME/KEY" (NAME
// is `name`, or "store://DIR" when it is empty: how the caller spells the bucket), and it
// refuses a key with an empty, "." or ".." part (storage/dir_store.h on disk, the S3 bucket's
// "<prefix>DIR/" otherwise). Errors: kInvalidArgument for an invalid directory name, those of
// makeS3Store.
Result<std::unique_ptr<ObjectStore>> openBucket(const StoreSite& site, const std::string& dir,
                                                const std::string& name = "");

// One side of a copy.
struct Place {
  std::string path;                    // a local path; "" when in a store
  std::unique_ptr<ObjectStore> store;  // the store, or null
  std::string key;  // in `store`: "" for its top; a trailing '/' means "a directory"

  bool local() const { return !store; }
};

// Where `uri` is: a local path as resolve() makes it (storage/uri.h: relative ones joined onto
// `cwd`; a store on disk), or a store and a key. Errors: kInvalidArgument (a bad URI), and those
// of storeSite, openBucket and openS3 (kUnauthenticated without credentials).
Result<Place> openPlace(const std::string& uri, const std::string& data_root,
                        const std::string& cwd = "");

}  // namespace cohort::storage
