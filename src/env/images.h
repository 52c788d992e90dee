// Container images as environments (`environment: {image: REF}`, `--image REF`). podman keeps
// the images: it pulls them, imports them, builds them, and holds their layers in its storage.
// cohort asks podman what an image is (its id, its layers' directories, its variables) and runs
// each rank in those layers itself (env/image_exec.h, plan/container.cc), so nothing of podman
// runs while a job does: no container, no conmon.
//
// Everything here runs podman as a child and blocks until it answers. Thread-compatible (no
// state of its own).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "env/environments.h"
#include "util/result.h"

namespace cohort::env {

// What podman's storage says about one image.
struct ImageInfo {
  std::string ref;                                       // as it was asked for
  std::string id;                                        // podman's image id (64 hex digits)
  std::vector<std::string> names;                        // its tags ("localhost/cohort-test:abc")
  std::vector<std::string> digests;                      // where it came from ("REPO@sha256:...")
  std::vector<std::string> layers;                       // its layers' directories, top first
  std::vector<std::pair<std::string, std::string>> env;  // its configuration's variables
  std::string created;                                   // as podman prints it
  int64_t size = 0;                                      // bytes
};

// The PATH a container gets when its image sets none (podman's and Docker's default).
inline constexpr const char* kDefaultImagePath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// podman's path, from PATH. Errors: kFailedPrecondition "podman is not installed: apt-get
// install podman".
Result<std::string> findPodman();

// Image `ref` as podman's local storage has it. Errors: kNotFound, in podman's own words, when
// it is not there; kFailedPrecondition when podman is missing or keeps the image in a storage
// other than overlay (whose layers cohort cannot use); kInvalidArgument for what podman does not
// take as a reference.
Result<ImageInfo> inspectImage(const std::string& ref);

// inspectImage(), pulled first when it is not there (podman pull's lines go to `progress`).
// Errors: as inspectImage; kNotFound naming the reference, in podman pull's own words, when it
// cannot be pulled.
Result<ImageInfo> findOrPullImage(const std::string& ref, const Progress& progress);

// The images in podman's local storage, newest first; none when podman is not installed.
std::vector<ImageInfo> localImages();

// Removes image `ref` from podman's storage (podman rmi). Errors: kNotFound; kFailedPrecondition
// in podman's words (a container uses it).
Result<void> removeImage(const std::string& ref);

// What a rank running in `image` has on top of the job's variables: the image's own (PATH first,
// podman's default when the image sets none), and COHORT_IMAGE, the reference.
std::vector<std::pair<std::string, std::string>> imageVariables(const ImageInfo& image);

// Where `program` is in the image: a bare name is looked up in `path` (the rank's PATH) inside
// the image's layers, a name with '/' is looked for in the layers when absolute and under
// `workdir` (which is bound in) when relative. Returns the path inside the image. Errors:
// kNotFound naming the program and the image.
Result<std::string> findInImage(const ImageInfo& image, const std::string& program,
                                const std::string& path, const std::string& workdir);

}  // namespace cohort::env
