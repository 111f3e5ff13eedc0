#!/usr/bin/env bash
# Glue for one offline GPU host lease: wheels in /opt/wheels, ansible-core from them, the project's
# own `make gpu-sweep` in its own session, polled; results packed into $OUT.
# usage: gpu.sh probe | start | poll [seconds] | serve-compare | pack
set -u
cd "$(dirname "$0")/.."
ANS=/opt/ans-site
export PYTHONPATH_ANS=$ANS
GPU_ANSIBLE="env PYTHONPATH=$ANS python3 $ANS/bin/ansible-playbook"
VENV_ARGS="-e @$PWD/.device/gpu-vars.yml ${EXTRA_VARS:-}"
case "$1" in
probe)
  mkdir -p /opt/wheels; cp .whl/p1/*.whl /opt/wheels/ 2>/dev/null; ls /opt/wheels | wc -l
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  command -v python3 nvcc ninja; ls -l /usr/local/cuda/bin/nvcc; python3 -V
  python3 -c 'import torch, sys; print(torch.__version__, torch.cuda.is_available(), sys.prefix)'
  echo "pid1: $(ps -p 1 -o comm=)"; df -h / | tail -1; nproc
  ;;
start)
  mkdir -p /opt/wheels; cp .whl/p2/*.whl /opt/wheels/; ls /opt/wheels | wc -l
  python3 -m pip install -q --no-index --no-deps --no-compile --target $ANS .whl/ans/*.whl || exit 1
  env PYTHONPATH=$ANS python3 $ANS/bin/ansible-playbook --version | head -2
  rm -rf results build .cache
  setsid bash -c "make gpu-sweep GPU_ANSIBLE='$GPU_ANSIBLE' GPU_MODELS='${GPU_MODELS:-qwen3-30b-a3b kimi-k2.6-cut18}' GPU_RUN_ID=${RUN:-h200} GPU_ARGS='$VENV_ARGS' > /tmp/gpu-sweep.log 2>&1; echo EXIT=\$? >> /tmp/gpu-sweep.log" < /dev/null > /dev/null 2>&1 &
  sleep 5; tail -3 /tmp/gpu-sweep.log
  ;;
poll)
  end=$((SECONDS + ${2:-500}))
  while [ $SECONDS -lt $end ]; do grep -q '^EXIT=' /tmp/gpu-sweep.log && break; sleep 5; done
  grep -E '^== gpu-sweep|gpu-host sglang-|TASK \[|fatal:|failed=|FAILED|EXIT=|ok=' /tmp/gpu-sweep.log | grep -v '^TASK' | tail -60
  tail -5 /tmp/gpu-sweep.log
  ;;
pack)
  mkdir -p $OUT; tar czf $OUT/results.tgz results build/plan /tmp/gpu-sweep.log /var/lib/sglang/run/*.log 2>/dev/null; ls -la $OUT
  ;;
esac
case "$1" in
compare)
  ANSP="env PYTHONPATH=$ANS python3 $ANS/bin/ansible-playbook"
  $ANSP -i inventory/gpu playbooks/deploy.yml -e gpu_model=qwen3-30b-a3b -e layout=tp1 $VENV_ARGS > /tmp/deploy.log 2>&1; echo deploy rc=$?
  grep -E "gpu-host sglang-|ready_after_s|fatal" /tmp/deploy.log | head
  python3 benchmarks/bench_real_server.py --url http://127.0.0.1:30000 --tokenizer /var/lib/sglang-models/qwen3-30b-a3b \
    --bench-serving-python /opt/sglang/venv/bin/python --concurrency 16 --num-prompts 64 --input-len 256 --output-len 256 \
    --runs 2 --json /tmp/compare.json 2>&1 | tail -12
  ;;
esac
