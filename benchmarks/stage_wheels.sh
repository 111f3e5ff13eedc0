#!/usr/bin/env bash
# Build the git-ignored .whl/ that benchmarks/gpu_lease.sh carries to an offline GPU host, each folder
# under the 64 MiB one device call may carry:
#   p1      sglang, sglang-kernel (repacked by the GPU recipe), flashinfer-python
#   p3      transformers (with the repo, p1 alone is near the 64 MiB a call may carry)
#   p2      the rest of SGLang 0.5.16's closure (the recipe's wheels.txt)
#   ans     ansible-core and what it needs beyond the image's Python (jinja2, pyyaml are there)
#   router  sglang-router, for replicas and prefill/decode layouts
#   mc      mooncake's transfer engine repacked to what SGLang's KV transfer loads (without the store,
#           the EP and process-group extensions and the binaries), msgpack, and mclibs.tgz: the shared
#           libraries its engine.so links that the GPU image lacks (libibverbs, libmlx5, libnuma from
#           Debian 12's packages; libcudart.so.12 from nvidia-cuda-runtime-cu12)
# Needs the network (PyPI, Debian) and the GPU recipe (RECIPE, default ../shared/recipes/sglang-gpu).
# usage: benchmarks/stage_wheels.sh [OUT, default .whl]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.whl}
recipe=${RECIPE:-../shared/recipes/sglang-gpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plat=""
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  plat="$plat --platform $p"
done
fetch() {  # fetch DIR REQUIREMENT...: wheels for CPython 3.12 on x86-64 Linux, no dependencies resolved
  local dir=$1; shift
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $plat -d "$dir" "$@"
}

rm -rf "$out" && mkdir -p "$out"/{p1,p2,p3,ans,router,mc}
bash "$recipe/fetch_wheels.sh" "$work/sg" > "$work/fetch.log"
for w in "$work"/sg/wheels/*.whl; do
  case $(basename "$w") in
    sglang-*|sglang_kernel-*|flashinfer_python-*) cp "$w" "$out/p1/" ;;
    transformers-*) cp "$w" "$out/p3/" ;;
    *) cp "$w" "$out/p2/" ;;
  esac
done
fetch "$out/ans" ansible-core==2.19.14 resolvelib==1.0.1 cryptography==50.0.2
fetch "$out/router" sglang-router==0.3.2

fetch "$work/mc" mooncake-transfer-engine==0.3.13.post1 nvidia-cuda-runtime-cu12==12.8.90
fetch "$out/mc" msgpack==1.2.4
# engine.so (what SGLang's mooncake backend imports) links libetcd_wrapper.so and libasio.so beside it
# and glog, gflags, yaml-cpp, jsoncpp from the wheel's .libs; the rest is the store and EP/PG code.
python3 "$recipe/repack_wheel.py" "$work"/mc/mooncake_transfer_engine-*.whl "$out/mc" \
  mooncake/libmooncake_pg.so mooncake/libmooncake_pg_device.so mooncake/libmooncake_ep_device.so \
  mooncake/transfer_engine_bench mooncake/store.so mooncake/mooncake_client mooncake/mooncake_master \
  mooncake/_ep. mooncake/pg_ mooncake_transfer_engine.libs/libetcd_wrapper- \
  mooncake_transfer_engine.libs/libasio-
mkdir -p "$work/debs" "$work/libs"
(cd "$work/debs" && apt-get download -q libibverbs1 ibverbs-providers libnuma1 > /dev/null)
for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/root"; done
cp -P "$work"/root/usr/lib/x86_64-linux-gnu/{libibverbs.so.1*,libmlx5.so.1*,libnuma.so.1*} "$work/libs/"
python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2], "wb").write(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))' \
  "$work"/mc/nvidia_cuda_runtime_cu12-*.whl "$work/libs/libcudart.so.12"
tar czf "$out/mc/mclibs.tgz" -C "$work/libs" .
du -sh "$out"/*
