#!/bin/sh
# Slipway agent bootstrap for ${OS}/${ARCH}. The server fills in ACCESS_URL and AUTH_TYPE.
#
# Runs the agent with $SLIPWAY_AGENT_PYTHON when that interpreter already has it (a workspace that is a process
# on the provisioner's own machine). Otherwise downloads the agent bundle from the server (the agent's code and
# the wheels of its dependencies), installs it offline into a private virtualenv, reused while the bundle does
# not change, and runs the agent from there. The agent token (CODER_AGENT_TOKEN or SLIPWAY_AGENT_TOKEN) is
# passed on untouched and never printed.
set -u

access_url='${ACCESS_URL}'
auth_type='${AUTH_TYPE}'
platform='${OS}-${ARCH}'

say() { printf 'slipway-agent: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}

[ "$auth_type" = token ] || die "auth type '$auth_type' is not supported: use auth = \"token\" in coder_agent"
SLIPWAY_AGENT_URL=$access_url
export SLIPWAY_AGENT_URL

# -P (Python 3.11+): an agent folder in the working directory is neither taken for the agent nor shadows it.
if [ -n "${SLIPWAY_AGENT_PYTHON:-}" ]; then
  if "$SLIPWAY_AGENT_PYTHON" -P -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("agent.__main__") is None)' 2>/dev/null; then
    exec "$SLIPWAY_AGENT_PYTHON" -P -m agent
  fi
  say "$SLIPWAY_AGENT_PYTHON cannot import the agent; downloading it instead"
fi

# Any Python >= 3.11 verifies and unpacks the bundle; the venv needs one the bundle has wheels for.
python=''
for candidate in python3 python3.13 python3.12 python3.11; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python=$(command -v "$candidate")
    break
  fi
done
if [ -z "$python" ]; then
  found=$(python3 -c 'import sys; print("Python %d.%d" % sys.version_info[:2])' 2>/dev/null) || found='no python3 at all'
  die "the agent needs Python 3.11 or newer as python3 (or python3.11 to python3.13) on PATH; found $found"
fi

[ -n "${SLIPWAY_AGENT_HOME:-}${HOME:-}" ] || die "set HOME or SLIPWAY_AGENT_HOME: the agent is installed there"
home=${SLIPWAY_AGENT_HOME:-$HOME/.cache/slipway-agent}
mkdir -p "$home" && chmod 700 "$home" || die "cannot create the private directory $home"
archive="$home/download.$$.tar.gz"
unpacked="$home/bundle.$$"
staging=''
cleanup() { rm -rf "$archive" "$archive.err" "$unpacked" ${staging:+"$staging"}; }
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# fetch URL FILE: download with the first tool found; on failure, $why says why in one line.
fetch() {
  rm -f "$2"
  if command -v curl >/dev/null 2>&1; then
    code=$(curl -sS -L --connect-timeout 20 -o "$2" -w '%{http_code}' "$1" 2>"$2.err")
    [ "$code" = 200 ] && return 0
    if [ -s "$2" ] && [ "$code" != 000 ]; then why="HTTP $code: $(head -c 300 "$2")"; else why=$(cat "$2.err"); fi
  elif command -v wget >/dev/null 2>&1; then
    wget -nv -O "$2" "$1" 2>"$2.err" && return 0
    why=$(tail -n 1 "$2.err")
  elif command -v busybox >/dev/null 2>&1 && busybox --list | grep -qx wget; then
    busybox wget -q -O "$2" "$1" 2>"$2.err" && return 0
    why=$(tail -n 1 "$2.err")
  else
    "$python" - "$1" "$2" 2>"$2.err" <<'EOF' && return 0
import shutil, sys, urllib.error, urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=60) as response, open(sys.argv[2], "wb") as out:
        shutil.copyfileobj(response, out)
except urllib.error.HTTPError as exc:
    sys.exit(f"HTTP {exc.code}: {exc.read(300).decode(errors='replace')}")
except (OSError, ValueError) as exc:
    sys.exit(str(exc))
EOF
    why=$(cat "$2.err")
  fi
  why=$(printf '%s' "$why" | tr -s '\r\n' '  ')
  return 1
}

# unpack ARCHIVE DIR: accept only what our server builds (regular files under slipway-agent/, SHA256SUMS first,
# every other file matching its checksum, none missing), write them into DIR, print the bundle's digest.
unpack() {
  rm -rf "$2"
  "$python" - "$1" "$2" <<'EOF'
import hashlib, os, sys, tarfile

archive, target = sys.argv[1], sys.argv[2]


def refuse(why):
    sys.exit(f"the download is not a complete agent bundle: {why}")


sums, seen = None, set()
os.makedirs(target)
try:
    with tarfile.open(archive, "r:gz") as bundle:
        for member in bundle:
            top, _, relative = member.name.partition("/")
            parts = relative.split("/")
            if top != "slipway-agent" or not relative or "" in parts or "." in parts or ".." in parts:
                refuse(f"unexpected entry {member.name!r}")
            if member.isdir():
                continue
            if not member.isfile():
                refuse(f"{member.name!r} is not a regular file")
            data = bundle.extractfile(member).read()
            if sums is None:
                if relative != "SHA256SUMS":
                    refuse("SHA256SUMS is not its first file")
                sums = {name: digest for digest, name in (line.split("  ", 1) for line in data.decode().splitlines())}
                bundle_digest = hashlib.sha256(data).hexdigest()
                continue
            if sums.get(relative) != hashlib.sha256(data).hexdigest():
                refuse(f"{relative} does not match its checksum")
            path = os.path.join(target, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "xb") as out:
                out.write(data)
            seen.add(relative)
except (OSError, EOFError, ValueError, tarfile.TarError) as exc:
    refuse(str(exc))
if sums is None or set(sums) != seen:
    refuse("files are missing")
print(bundle_digest[:16])
EOF
}

verified() {
  digest=$(unpack "$archive" "$unpacked" 2>"$archive.err") && return 0
  why=$(tr -s '\r\n' '  ' <"$archive.err")
  return 1
}

url="${access_url}bin/slipway-agent-$platform.tar.gz"
say "downloading $url"
until fetch "$url" "$archive" && verified; do
  say "could not download $url: $why; retrying in 5 s"
  sleep 5
done

# The venv: one of the workspace's interpreters the bundle has wheels for.
versions=$(cat "$unpacked/python-versions.txt")
venv_python=''
for candidate in python3 python3.13 python3.12 python3.11; do
  version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  case " $versions " in *" $version "*)
    venv_python=$(command -v "$candidate")
    break
    ;;
  esac
done
[ -n "$venv_python" ] || die "the agent bundle has wheels for Python $versions only; install one of them in the workspace"

venv="$home/venv-$digest-py$version"
if ! { [ -f "$venv/.complete" ] && "$venv/bin/python" -c '' 2>/dev/null; }; then
  say "installing the agent into $venv (Python $version, offline)"
  staging="$venv.tmp.$$"
  "$venv_python" -m venv "$staging" ||
    die "could not create a virtualenv with $venv_python (Debian and Ubuntu need the python3-venv package)"
  # --isolated: the workspace's PIP_* variables and pip.conf must not send pip elsewhere than the bundle.
  "$staging/bin/python" -m pip --isolated install --quiet --disable-pip-version-check --no-input --no-cache-dir \
    --no-index --only-binary=:all: --find-links "$unpacked/wheels" --requirement "$unpacked/requirements.txt" ||
    die "installing the agent's dependencies from the bundle failed (see pip's message above)"
  # The agent and the protocol package it shares with the server.
  "$staging/bin/python" -c 'import os, shutil, sys, sysconfig; [shutil.copytree(os.path.join(sys.argv[1], name), os.path.join(sysconfig.get_path("purelib"), name)) for name in ("agent", "protocol")]' \
    "$unpacked" || die "could not copy the agent's code into $staging"
  : >"$staging/.complete"
  if [ -f "$venv/.complete" ] && "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$staging" # another start with the same bundle got there first
  else
    rm -rf "$venv" # a broken one, say from an interrupted start
    # rename(2), unlike mv, never moves the new venv into a directory another start has just put in place.
    "$python" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$staging" "$venv" 2>/dev/null || rm -rf "$staging"
  fi
  staging=''
fi

# .complete's time says when a venv was last started from: others unused for a day (older bundles) go, and so
# do leftovers of starts that were killed.
touch "$venv/.complete"
for old in "$home"/venv-* "$home"/bundle.* "$home"/download.*; do
  [ "$old" = "$venv" ] && continue
  marker="$old/.complete"
  [ -f "$marker" ] || marker=$old
  [ -n "$(find "$marker" -prune -mtime +0 2>/dev/null)" ] && rm -rf "$old"
done

cleanup
trap - EXIT TERM INT
say "starting the agent"
# -I: the workspace's PYTHONPATH or a folder named agent in the working directory must not shadow the bundle.
exec "$venv/bin/python" -I -m agent
