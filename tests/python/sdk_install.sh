#!/bin/sh
# `pip install ./python` works, installs a package that imports with the standard library
# alone, and the package's version is cohort's (CMakeLists.txt's project version).
#   tests/python/sdk_install.sh SOURCE_DIR BUILD_DIR VERSION
set -eu
src=$1 build=$2 want=$3
target="$build/sdk-install"
rm -rf "$target" "$build/sdk-install-build"
mkdir -p "$build/sdk-install-build"
# Offline-friendly: the build backend (setuptools) is the system's, nothing is downloaded.
cp -r "$src/python" "$build/sdk-install-build/python"
/usr/bin/python3 -m pip install -q --no-build-isolation --no-deps --no-index \
  --target "$target" "$build/sdk-install-build/python"
got=$(cd / && PYTHONPATH="$target" /usr/bin/python3 -S -c 'import sys; import cohort; assert cohort.__file__.startswith(sys.argv[1]), cohort.__file__; print(cohort.__version__)' "$target")
[ "$got" = "$want" ] || { echo "installed version $got, cohort is $want" >&2; exit 1; }
PYTHONPATH="$target" /usr/bin/python3 -c 'import cohort; from cohort import Client, run, NotFound, JobRecord; print("ok")'
