#!/usr/bin/env bash
# Build the Debian package of ingestd: OUTDIR/ingestd_<version>_<arch>.deb (default dist/).
#
#   packaging/build-deb.sh [OUTDIR]
#
# The application lives in its own virtualenv at /opt/ingestd, made from Debian's Python
# (/usr/bin/python3, bookworm: 3.11). A venv is not relocatable: pip writes its absolute
# path into script shebangs, activate scripts, pyvenv.cfg and every .pyc. So the venv is
# built at STAGE/opt/ingestd in a temporary directory and then relocated, all of it
# checked:
#   1. the project is built into a wheel from a copy of its sources (the working tree
#      gets no build/ or egg-info) and installed non-editable with its dependencies from
#      PyPI, pinned by a constraints file made from the dev venv (`pip freeze
#      --exclude-editable` of .venv: the versions the test suite ran against);
#   2. the staged path is rewritten to /opt/ingestd in the text files of bin/ (shebangs,
#      activate*) and in pyvenv.cfg; bin/python stays a symlink to /usr/bin/python3.X;
#   3. every .pyc is deleted and compiled again with the final path recorded
#      (compileall -s STAGE -p /), so tracebacks name /opt/ingestd/...;
#   4. `grep -r` of the whole tree for the temporary path must find nothing, and the
#      packaged default config (packaging/ingestd.toml, minimal: the full example goes to
#      /usr/share/doc/ingestd/examples/) must pass `ingestd check-config` run by the
#      staged venv.
# The package depends on python3.X (the venv is bound to that interpreter and its ABI)
# and is arch-specific (the wheels have compiled code).
#
# Environment: PYTHON (default /usr/bin/python3), DEV_VENV (default .venv: the source of
# the pins; without it the newest versions pyproject.toml allows are taken),
# SYSTEMD_DIR (default systemd/), MAINTAINER, PIP_TIMEOUT (seconds, default 60 per request),
# BUILD_TIMEOUT (seconds for each pip run, default 600), COMPRESS (dpkg-deb options,
# default "-Zxz -z3").
set -euo pipefail
umask 022
START=$SECONDS

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
OUTDIR=${1:-$REPO/dist}
PYTHON=${PYTHON:-/usr/bin/python3}
DEV_VENV=${DEV_VENV:-$REPO/.venv}
SYSTEMD_DIR=${SYSTEMD_DIR:-$REPO/systemd}
MAINTAINER=${MAINTAINER:-ingestd maintainers <root@localhost>}
PIP_TIMEOUT=${PIP_TIMEOUT:-60}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
# xz -3: 54 MB in ~20 s on two cores; dpkg-deb's default (xz -6) saves 6 MB for a minute.
COMPRESS=${COMPRESS:--Zxz -z3}
PREFIX=/opt/ingestd

say() { echo "build-deb: [$((SECONDS - START))s] $*"; }
die() { echo "build-deb: $*" >&2; exit 1; }

command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (apt-get install dpkg)"
[ -x "$PYTHON" ] || die "$PYTHON is missing"
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$PYTHON cannot make venvs (apt-get install python3-venv)"

PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYEXE=/usr/bin/python$PYVER  # the venv links this, not the python3 alias
[ -x "$PYEXE" ] || die "$PYEXE is missing"
VERSION=$("$PYTHON" - "$REPO/pyproject.toml" <<'PY'
import re, sys, tomllib
v = tomllib.load(open(sys.argv[1], "rb"))["project"]["version"]
# PEP 440 pre-releases sort before the release in Debian only with a tilde.
print(re.sub(r"\.?(a|b|rc|dev)(\d*)", r"~\1\2", v))
PY
)
ARCH=$(dpkg --print-architecture)
DEB=ingestd_${VERSION}_${ARCH}.deb

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ingestd-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/root
VENV=$STAGE$PREFIX
PIP=(timeout "$BUILD_TIMEOUT" "$VENV/bin/python" -m pip --no-input --disable-pip-version-check
     --timeout "$PIP_TIMEOUT" --retries 3)

# -- the pins -----------------------------------------------------------------------------
CONSTRAINTS=$WORK/constraints.txt
: >"$CONSTRAINTS"
PIP_PIN=
if [ -x "$DEV_VENV/bin/pip" ]; then
    # Only name==version lines: a direct reference (name @ url) is no constraint.
    "$DEV_VENV/bin/pip" freeze --exclude-editable --disable-pip-version-check \
        | grep -E '^[A-Za-z0-9._-]+==' | grep -viE '^ingestd==' >"$CONSTRAINTS" || true
    PIP_PIN=$("$DEV_VENV/bin/python" -c 'import pip; print(pip.__version__)' 2>/dev/null || true)
    say "pinned to $DEV_VENV: $(wc -l <"$CONSTRAINTS") packages, pip ${PIP_PIN:-as bundled}"
else
    say "no $DEV_VENV: dependencies are NOT pinned (newest allowed by pyproject.toml)"
fi

# -- the venv -----------------------------------------------------------------------------
say "venv with $PYEXE (Python $PYVER) at staged $PREFIX"
mkdir -p "$STAGE"
"$PYEXE" -m venv "$VENV"
if [ -n "$PIP_PIN" ]; then
    "${PIP[@]}" install -q "pip==$PIP_PIN"
fi

# The project's sources only (a copy: building in the tree would leave build/ behind).
mkdir "$WORK/src"
tar -C "$REPO" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml README.md ingestd worker \
    | tar -C "$WORK/src" -xf -
# (Its output only on failure: setuptools' deprecation notices are no news here.)
"${PIP[@]}" wheel -q --no-deps -w "$WORK/wheels" "$WORK/src" >"$WORK/wheel.log" 2>&1 \
    || { cat "$WORK/wheel.log" >&2; die "building the ingestd wheel failed"; }
WHEEL=$(ls "$WORK"/wheels/ingestd-*.whl)
say "installing $(basename "$WHEEL") and its dependencies"
"${PIP[@]}" install -q --prefer-binary -c "$CONSTRAINTS" "$WHEEL"
"${PIP[@]}" check >"$WORK/check.log" 2>&1 || { cat "$WORK/check.log" >&2; die "pip check failed"; }
# The wheel's temporary location, recorded for `pip show`; not a direct-URL install.
rm -f "$VENV"/lib/python*/site-packages/ingestd-*.dist-info/direct_url.json

# -- the default config, checked by the staged application --------------------------------
# A minimal ingestd.toml (the conffile: only the database), an empty conf.d/ for the
# drop-ins of `ingestd account add` / `watch add` and the administrator's own, and the
# full commented example under /usr/share/doc: a new release that changes the example
# changes no conffile, so an upgrade of a configured machine asks nothing.
ETC=$STAGE/etc/ingestd
install -d -m 0750 "$ETC" "$ETC/conf.d"
install -m 0640 "$HERE/ingestd.toml" "$ETC/ingestd.toml"
env -u INGESTD_CONFIG PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -m ingestd.cli \
    check-config "$ETC/ingestd.toml" || die "the packaged default config does not pass check-config"

# -- relocation ---------------------------------------------------------------------------
say "relocating $VENV -> $PREFIX"
while IFS= read -r -d '' f; do
    if grep -qIF "$VENV" "$f"; then
        sed -i "s|$VENV|$PREFIX|g" "$f"
    fi
done < <(find "$VENV/bin" -maxdepth 1 -type f -print0)
sed -i "s|$VENV|$PREFIX|g" "$VENV/pyvenv.cfg"
say "compiling .pyc files for $PREFIX"
find "$VENV" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$VENV" -name '*.pyc' -delete
# Some packages ship files that are not Python 3.X source (templates, tests of other
# versions); compileall reports them and fails, as pip's own compile step ignores them.
"$VENV/bin/python" -m compileall -q -j 0 -s "$STAGE" -p / "$VENV/lib" >"$WORK/compileall.log" 2>&1 \
    || say "compileall skipped $(grep -c '^\*\*\*' "$WORK/compileall.log" || true) file(s) it cannot compile"
leftovers=$(grep -rlF "$WORK" "$STAGE" || true)
[ -z "$leftovers" ] || die "still naming the build directory $WORK:"$'\n'"$leftovers"
head -1 "$VENV/bin/ingestd" | grep -qx "#!$PREFIX/bin/python" \
    || die "unexpected shebang in bin/ingestd: $(head -1 "$VENV/bin/ingestd")"

# -- the rest of the tree -----------------------------------------------------------------
install -d "$STAGE/usr/bin" "$STAGE/usr/share/doc/ingestd"
ln -s "$PREFIX/bin/ingestd" "$STAGE/usr/bin/ingestd"
install -m 0644 "$REPO/README.md" "$REPO/docs/configuration.md" "$STAGE/usr/share/doc/ingestd/"
[ ! -f "$REPO/docs/config-dropins.md" ] || install -m 0644 "$REPO/docs/config-dropins.md" "$STAGE/usr/share/doc/ingestd/"
install -d "$STAGE/usr/share/doc/ingestd/examples"
install -m 0644 "$REPO/config/ingestd.example.toml" "$STAGE/usr/share/doc/ingestd/examples/ingestd.toml"
install -m 0644 "$REPO/packaging/grafana/ingestd-dashboard.json" "$STAGE/usr/share/doc/ingestd/"
install -d "$STAGE/usr/share/doc/ingestd/docs"
install -m 0644 "$REPO"/docs/*.md "$STAGE/usr/share/doc/ingestd/docs/"
install -d "$STAGE/usr/share/doc/ingestd/fail2ban"
cp -r "$REPO/config/fail2ban/." "$STAGE/usr/share/doc/ingestd/fail2ban/"

packaged=()
copy_units() {  # DEST FILE...
    local dest=$1 f
    shift
    for f in "$@"; do
        [ -f "$f" ] || continue
        install -d "$STAGE$dest"
        install -m 0644 "$f" "$STAGE$dest/"
        packaged+=("$dest/$(basename "$f")")
    done
}
if [ -d "$SYSTEMD_DIR" ]; then
    shopt -s nullglob
    copy_units /lib/systemd/system "$SYSTEMD_DIR"/*.{service,target,timer,socket,path}
    copy_units /usr/lib/sysusers.d "$SYSTEMD_DIR"/sysusers.d/*.conf
    copy_units /usr/lib/tmpfiles.d "$SYSTEMD_DIR"/tmpfiles.d/*.conf
    shopt -u nullglob
fi
if [ ${#packaged[@]} -eq 0 ]; then
    say "systemd: nothing to package ($SYSTEMD_DIR has no units yet)"
else
    say "systemd: ${packaged[*]}"
fi

# -- DEBIAN/ ------------------------------------------------------------------------------
chmod -R u+rwX,go+rX,go-w "$STAGE/opt" "$STAGE/usr"
install -d "$STAGE/DEBIAN"
install -m 0644 "$HERE/debian/conffiles" "$STAGE/DEBIAN/"
install -m 0755 "$HERE/debian/postinst" "$HERE/debian/prerm" "$HERE/debian/postrm" "$STAGE/DEBIAN/"
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@MAINTAINER@|$MAINTAINER|" \
    -e "s|@INSTALLED_SIZE@|$SIZE|" -e "s|@PYTHON_PACKAGE@|python$PYVER|" \
    "$HERE/debian/control.in" >"$STAGE/DEBIAN/control"
if grep '@[A-Z_]*@' "$STAGE/DEBIAN/control"; then
    die "unreplaced placeholder in DEBIAN/control"
fi

mkdir -p "$OUTDIR"
say "dpkg-deb: $(du -sh "$STAGE" | cut -f1) to compress"
# shellcheck disable=SC2086 # COMPRESS is options, split on purpose
dpkg-deb --root-owner-group $COMPRESS --build "$STAGE" "$WORK/$DEB" >/dev/null
mv -f "$WORK/$DEB" "$OUTDIR/$DEB"
say "$OUTDIR/$DEB: $(du -h "$OUTDIR/$DEB" | cut -f1) (installed $((SIZE / 1024)) MiB)," \
    "built in $((SECONDS - START)) s"
