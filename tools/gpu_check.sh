#!/usr/bin/env bash
# The GPU machine's one prepared check (issue 33; docs/benchmarks.md, measurements 12 and 13):
#   1. NVENC through JetEncode (python -m bench --only gpu): raw encoder speed, then a GPU worker
#      running H.264/HEVC/AV1 ladders unsplit and split, each output checked frame by frame;
#   2. the split benchmark on many workers (the `farm` shape on 2, 4, 8 and 16 one-thread workers);
#   3. the quality stage's cost on that machine (--quick --only quality --quality-parts cost).
# `tools/gpu_check.sh split-vmaf` runs the split bench alone, every frame scored, on 16 workers.
# It runs on a bare machine that has python3 and nothing else: .carry/site312.tar.xz holds the
# packages (cp312 wheels, unpacked and trimmed), PyAV's FFmpeg libraries with an `ffmpeg` built on
# them (NVENC; no libvmaf), imageio-ffmpeg's static FFmpeg (libvmaf) and pgserver's PostgreSQL.
# tools/gpu_carry.sh builds that file. Results go to $OUT (8 files at most come back): device.log, gpu.json, split.json, quality.json,
# and the gpu step's source and top rungs, to be scored with VMAF where libvmaf is.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device.log") 2>&1
step() { echo "== $(date -u +%T) $*"; }

step setup
SITE=/tmp/jetencode-site
mkdir -p "$SITE" && tar xJf .carry/site312.tar.xz -C "$SITE" || exit 1
# A .pth file, not PYTHONPATH: media probes run in an isolated `python -I` child (media/sandbox.py),
# which ignores PYTHON* variables but reads the interpreter's site-packages.
echo "import sys; sys.path.insert(0, '$SITE')" >"$(python3 -c 'import site; print(site.getsitepackages()[0])')/jetencode-check.pth"
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/nvidia/bin
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done
nproc; python3 --version; uname -r
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
ls /usr/local/nvidia/lib64 2>/dev/null | grep -i -E "encode|nvcuvid|libcuda\." | tr '\n' ' '; echo
ldconfig -p | grep -i -E "nvidia-encode|nvcuvid|libcuda\.so" | head -5
PG=/tmp/jetencode-pg
python3 -c "import pgserver; print(pgserver.get_server('$PG', cleanup_mode=None).get_uri())" || exit 1
export DATABASE_URL="postgresql://postgres:@/postgres?host=$PG"

if [ "${1:-}" = "split-vmaf" ]; then  # the split bench with every frame scored, 16 workers
    step "split on 16 workers, VMAF on every frame"
    timeout 380 python3 -m bench --only split --split-shape farm --split-workers 16 \
        --output "$OUT/split-vmaf.json"
    step done
    exit 0
fi

step "gpu (NVENC)"
JETENCODE_FFMPEG=$SITE/av.libs/ffmpeg timeout 170 python3 -m bench --only gpu --gpu-keep "$OUT" \
    --output "$OUT/gpu.json"
step "split on many workers"
timeout 260 python3 -m bench --only split --split-shape farm --split-workers 2 4 8 16 \
    --split-metrics none --output "$OUT/split.json"
step "quality stage"
timeout 60 python3 -m bench --quick --only quality --quality-parts cost --output "$OUT/quality.json"
step done
