#!/usr/bin/env bash
# Builds .carry/site312.tar.xz, what tools/gpu_check.sh needs on a bare GPU machine that has only
# python3 (3.12) and cannot reach a package registry. Run it here, from the repository root, with
# network access to PyPI and deb.debian.org (about 5 minutes on 2 cores); then hand the device tool
# `carry: [".carry"]` (add `/.carry/` to .git/info/exclude first).
#
# What goes in (the device tool carries 64 MiB in all, this checkout included, so it is trimmed):
# - the runtime packages as cp312 manylinux wheels, unpacked (Django without its other locales and
#   GIS, django-ninja without its Swagger assets, pgserver without headers, static libraries and
#   client tools but initdb/pg_ctl/postgres/psql/pg_dump);
# - imageio-ffmpeg's static FFmpeg (libx264/x265/aom, libvmaf): CPU encodes and the quality stage;
# - an `ffmpeg` built from FFmpeg 7.1.5's fftools against PyAV's own FFmpeg 7.1 libraries, which have
#   NVENC (h264/hevc/av1_nvenc, loaded from the driver at run time), put beside them in av.libs/.
#   libavfilter 10.4.100 predates av_buffersrc_get_status (7.1.5's fftools call it to close
#   inputs early): that call is patched out, which is 7.1.0's behaviour. PyAV's libx265 is
#   replaced by a stub with its soname (the check never encodes HEVC in software with this build,
#   and the real one did not fit).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/jetencode-carry}
PY=${PY:-$ROOT/.venv/bin/python}
rm -rf "$WORK" && mkdir -p "$WORK/wheels" "$WORK/site"
cd "$WORK"

platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms+=" --platform $p"; done
pins=$("$PY" -m pip freeze | grep -i -E '^(django|asgiref|sqlparse|psycopg|psycopg-binary|django-ninja|pydantic|pydantic[-_]core|annotated-types|annotated-doc|typing-inspection|typing[-_]extensions|whitenoise|dj-database-url|django-cors-headers|pgserver|platformdirs|fasteners|imageio-ffmpeg|av)==')
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $platforms -d wheels $pins
"$PY" -m pip install -q --no-index --no-deps --no-compile --target site --python-version 3.12 \
    --implementation cp --only-binary=:all: $platforms wheels/*.whl

cd site
for d in $(find django -type d -name locale); do
    find "$d" -mindepth 1 -maxdepth 1 -type d ! -name en -exec rm -rf {} +
done
rm -rf django/contrib/gis ninja/static pgserver/pginstall/include pgserver/pginstall/lib/*.a \
    pgserver/pginstall/lib/postgresql/pgxs pgserver/pginstall/lib/postgresql/vector.so
find pgserver/pginstall/bin -type f ! -name initdb ! -name pg_ctl ! -name postgres ! -name psql \
    ! -name pg_dump -delete
find av -name '*.pyx' -o -name '*.pxd' -o -name '*.pyi' | xargs rm -f

# The NVENC ffmpeg: FFmpeg 7.1.5's command-line tool on PyAV's libraries.
cd "$WORK"
curl -sSf -O http://deb.debian.org/debian/pool/main/f/ffmpeg/ffmpeg_7.1.5.orig.tar.xz
tar xf ffmpeg_7.1.5.orig.tar.xz && cd ffmpeg-7.1.5
# Only fftools is compiled; the encoders (NVENC among them) are whatever PyAV's libavcodec has.
./configure --enable-shared --disable-static --disable-autodetect --enable-version3 --disable-postproc \
    --disable-doc --disable-ffplay --disable-debug >/dev/null
sed -i 's/if (av_buffersrc_get_status(ifp->filter))/if (0 \&\& ifp)/' fftools/ffmpeg_filter.c
objs="ffmpeg ffmpeg_dec ffmpeg_demux ffmpeg_enc ffmpeg_filter ffmpeg_hw ffmpeg_mux ffmpeg_mux_init"
objs+=" ffmpeg_opt ffmpeg_sched objpool sync_queue thread_queue cmdutils opt_common"
make -j"$(nproc)" $(for o in $objs; do echo "fftools/$o.o"; done) >/dev/null
AV=$WORK/site/av.libs
libs=""
for n in avdevice avfilter avformat avcodec swresample swscale avutil; do
    libs+=" -l:$(basename "$(ls "$AV"/lib$n-*.so*)")"
done
gcc -o "$AV/ffmpeg" fftools/*.o -L"$AV" $libs -Wl,--disable-new-dtags,-rpath,'$ORIGIN' -lm -lpthread
x265=$(basename "$(ls "$AV"/libx265-*.so*)")
api=$(nm -D --undefined-only "$AV"/libavcodec-*.so* | awk '/x265_api_get/ {print $2}')
echo "const void *$api(int bit_depth) { (void)bit_depth; return 0; }" >x265stub.c
gcc -O2 -shared -fPIC -Wl,-soname,"$x265" -o "$AV/$x265" x265stub.c
"$AV/ffmpeg" -hide_banner -encoders | grep -q h264_nvenc

mkdir -p "$ROOT/.carry"
tar cf - -C "$WORK/site" . | xz -T0 -8 >"$ROOT/.carry/site312.tar.xz"
ls -l "$ROOT/.carry/site312.tar.xz"
