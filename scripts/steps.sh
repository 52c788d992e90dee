# Sourced by scripts/setup, scripts/test and scripts/fuzz: each step of a setup is one line that
# says what runs and how long it has taken; what the tools print (apt, pip, go, cmake, ninja) goes
# to a log file, whose path and last lines are shown when a step fails.
#
#   steps_begin NAME LOG     lines start with "NAME:", tools' output goes to LOG (emptied)
#   step WHAT COMMAND...     runs COMMAND quietly; on a terminal one line, updated as it runs
#                            (with ninja's [done/total]); elsewhere a line a minute and a last
#                            one. Exits with COMMAND's status, after the log's tail, if it fails
#   step --may-fail WHAT COMMAND...   the same, but returns COMMAND's status instead of exiting
#   install_debian WHY PKG...  installs from Debian's packages those of PKG that are missing
#   use_ccache               sets cmake_launcher to cmake's flag for ccache, where there is one

steps_begin() {
  steps_name=$1
  steps_log=$2
  mkdir -p "$(dirname "$steps_log")"
  : >"$steps_log"
}

steps_say() { echo "$steps_name: $*" >&2; }

steps_clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# What the running step printed: the log from byte $1 on.
steps_output() { tail -c "+$(($1 + 1))" "$steps_log"; }

# "WHAT [done/total] m:ss": the step, the last count ninja printed in it (if it runs ninja; the
# step began at byte $2 of the log) and how long it has run (it began at $SECONDS $3).
steps_line() {
  local done_total
  done_total=$(steps_output "$2" | tail -c 8192 | grep -o '^\[[0-9]*/[0-9]*\]' | tail -n 1 || true)
  echo "$1${done_total:+ $done_total} $(steps_clock $((SECONDS - $3)))"
}

step() {
  local may_fail=0
  [ "$1" = --may-fail ] && { may_fail=1; shift; }
  local what=$1 start=$SECONDS pid rc=0 shown=0 line offset
  shift
  echo "== $(date -u '+%F %T') $what: $*" >>"$steps_log"
  offset=$(stat -c %s "$steps_log")
  "$@" >>"$steps_log" 2>&1 </dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    line=$(steps_line "$what" "$offset" "$start")
    if [ -t 2 ]; then
      printf '\r\033[K%s: %s' "$steps_name" "$line" >&2
    elif [ $((SECONDS - start)) -ge $((shown + 60)) ]; then
      shown=$((SECONDS - start))
      steps_say "$line"
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  line=$(steps_line "$what" "$offset" "$start")
  [ -t 2 ] && printf '\r\033[K' >&2
  if [ "$rc" -ne 0 ]; then
    steps_say "$line: failed (exit code $rc); its last lines (all of it: $steps_log):"
    steps_output "$offset" | tail -n 40 | sed 's/^/  | /' >&2
    [ "$may_fail" = 1 ] && return "$rc"
    exit "$rc"
  fi
  steps_say "$line"
}

steps_apt_get() {
  local sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "$@"
}

install_debian() {
  local why=$1 p missing=()
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "== missing: ${missing[*]}" >>"$steps_log"
  step "installing ${#missing[@]} Debian package(s) for $why" steps_apt_get "${missing[@]}"
}

# ccache keeps compiled objects between builds and clones (in ~/.cache/ccache): a second clone,
# or CI's next run on the same machine, compiles only what changed. Paths below this tree are
# hashed relative to it (CCACHE_BASEDIR, written into the build's launcher so that a later
# `ninja -C build` does the same; CMakeLists.txt maps them in the debug information too).
use_ccache() {
  cmake_launcher=()
  if command -v ccache >/dev/null; then
    cmake_launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_BASEDIR=$PWD;ccache")
  fi
}
