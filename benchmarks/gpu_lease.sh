#!/usr/bin/env bash
# Glue for one offline GPU host lease: wheels in /opt/wheels, ansible-core from them, the project's
# own `make gpu-sweep` in its own session, polled; then one layout with an API key; results packed.
# The wheels travel in .whl/p1, .whl/p2, .whl/p3 (SGLang 0.5.16's closure, split under the 64 MiB a copy may
# hold), .whl/ans (ansible-core), .whl/router and .whl/mc (see stage); the host variables are GPU_VARS
# and KEYED_VARS.
# usage: benchmarks/gpu_lease.sh probe | start | poll [seconds] | keyed | capture | profile | pack
set -u
cd "$(dirname "$0")/.."
ANS=/opt/ans-site
GPU_ANSIBLE="env PYTHONPATH=$ANS python3 $ANS/bin/ansible-playbook"
# the lease's folder (its gpu-vars.yml, keyed-vars.yml): RESULTS=benchmarks/results/<lease> to change
RESULTS=${RESULTS:-benchmarks/results/h200-2026-12-02-units}
VARS="-e @$PWD/${GPU_VARS:-$RESULTS/gpu-vars.yml}"
# more vars files after the lease's own, later ones winning: EXTRA_VARS="a.yml b.yml"
for f in ${EXTRA_VARS:-}; do VARS="$VARS -e @$PWD/$f"; done
KEYED="-e @$PWD/${KEYED_VARS:-$RESULTS/keyed-vars.yml}"
# Whatever wheel folders this call carried, into /opt/wheels (files stay while the host is held, so
# the wheel set may come over several calls): .whl/p1, .whl/p2, .whl/p3, .whl/router (sglang-router), .whl/mc
# (mooncake's transfer engine, repacked, and mclibs.tgz: the shared libraries it needs that the image
# lacks, into /opt/mclibs); .whl/ans (ansible-core) into $ANS.
stage() {
  mkdir -p /opt/wheels
  for d in p1 p2 p3 router mc; do [ -d .whl/$d ] && cp .whl/$d/*.whl /opt/wheels/; done
  if [ -f .whl/mc/mclibs.tgz ]; then mkdir -p /opt/mclibs && tar xzf .whl/mc/mclibs.tgz -C /opt/mclibs && chmod -R a+rX /opt/mclibs; fi
  if [ -d .whl/ans ]; then python3 -m pip install -q --no-index --no-deps --no-compile --target $ANS .whl/ans/*.whl || exit 1; fi
  ls /opt/wheels | wc -l
}
case "$1" in
probe)
  stage
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  command -v python3 nvcc ninja; python3 -V
  python3 -c 'import torch, sys; print(torch.__version__, torch.cuda.is_available(), sys.prefix)'
  echo "pid1: $(ps -p 1 -o comm=)"; df -h / | tail -1; nproc
  # what one module costs here before its own work: the interpreter's start, and Ansible's module base
  TIMEFORMAT="python3 -c pass: %R s"; for i in 1 2 3; do time python3 -c pass; done
  TIMEFORMAT="import ansible.module_utils.basic: %R s"; time env PYTHONPATH=$ANS python3 -c 'import ansible.module_utils.basic'
  python3 -X importtime -c pass 2>&1 | sort -t'|' -k2 -n | tail -4
  if [ -d .whl/mc ]; then
    # does mooncake's transfer engine load here (its libraries from /opt/mclibs)?
    python3 -m pip install -q --no-index --no-deps --target /tmp/mct .whl/mc/*.whl
    env LD_LIBRARY_PATH=/opt/mclibs PYTHONPATH=/tmp/mct python3 -c 'from mooncake.engine import TransferEngine; print("mooncake.engine loads")' 2>&1 | tail -3
    LD_LIBRARY_PATH=/opt/mclibs ldd /tmp/mct/mooncake/engine.so | grep 'not found'
  fi
  ;;
start)
  stage
  [ -x $ANS/bin/ansible-playbook ] || { echo "ansible-core is not staged: carry .whl/ans"; exit 1; }
  # the xgrammar stand-in the wheel set leaves out, for sglang_venv_extra_paths: [/opt/shims]
  mkdir -p /opt/shims && cp -r benchmarks/shims/xgrammar /opt/shims/ && chmod -R a+rX /opt/shims
  env PYTHONPATH=$ANS python3 $ANS/bin/ansible-playbook --version | head -2
  rm -rf results build .cache
  # each task's seconds on this host (callback_plugins/task_times.py): where a layout's tool_s goes
  rm -f /tmp/task-times.jsonl
  setsid env ANSIBLE_CALLBACKS_ENABLED=task_times SGLANG_LAYOUTS_TASK_TIMES=/tmp/task-times.jsonl \
    bash -c "make gpu-sweep GPU_ANSIBLE='$GPU_ANSIBLE' GPU_MODELS='${GPU_MODELS:-qwen3-30b-a3b kimi-k2.6-cut18}' GPU_RUN_ID=${RUN:-h200b} GPU_ARGS='$VARS' > /tmp/gpu-sweep.log 2>&1; echo EXIT=\$? >> /tmp/gpu-sweep.log" < /dev/null > /dev/null 2>&1 &
  sleep 5; tail -3 /tmp/gpu-sweep.log
  ;;
poll)
  end=$((SECONDS + ${2:-500}))
  # the logs so far go to $OUT on every turn: a call cut short by its limit (or the lease's budget)
  # still brings back the engine's start (its memory lines) and the sweep's log
  while [ $SECONDS -lt $end ]; do
    [ -n "${OUT:-}" ] && mkdir -p $OUT/live && cp /tmp/gpu-sweep.log /var/lib/sglang/run/*.log $OUT/live/ 2>/dev/null
    grep -q '^EXIT=' /tmp/gpu-sweep.log && break; sleep 5
  done
  grep -E '^== gpu-sweep|gpu-host sglang-|fatal:|failed=|FAILED|EXIT=|ok=' /tmp/gpu-sweep.log | tail -60
  tail -5 /tmp/gpu-sweep.log
  ;;
keyed)
  # The sweep of one layout under an API key (keyed-vars.yml), while a loop asks /v1/models with and
  # without the key every 5 s; then where the key is found on the host.
  mkdir -p /opt/wheels; cp .whl/p2/*.whl /opt/wheels/
  python3 -m pip install -q --no-index --no-deps --no-compile --target $ANS .whl/ans/*.whl || exit 1
  rm -rf results build .cache
  ( for i in $(seq 1 100); do
      a=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/v1/models)
      b=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sk-h200-lease-canary' http://127.0.0.1:30000/v1/models)
      h=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health)
      echo "$(date +%T) no-key=$a key=$b health=$h"; sleep 5; done > /tmp/keyed-probe.log 2>&1 ) &
  make gpu-sweep GPU_ANSIBLE="$GPU_ANSIBLE" GPU_MODELS=qwen3-30b-a3b GPU_RUN_ID=h200b-keyed \
    GPU_ARGS="$KEYED" > /tmp/keyed.log 2>&1; echo sweep rc=$?
  grep -E 'gpu-host sglang-|fatal:|ok=' /tmp/keyed.log | tail -12
  sort /tmp/keyed-probe.log | awk '{print $2, $3, $4}' | uniq -c
  grep -rl 'sk-h200-lease-canary' /var/lib/sglang /etc /root/.ansible results build /tmp/keyed.log 2>/dev/null | sed 's/^/key found in: /'
  ;;
capture)
  # SGLang's own log of a JIT build that cannot run its build tool (issue 28: ninja only in the base
  # env's bin/, not on the unit's PATH), for tests/fixtures: the venv the sweep built, run as the
  # service user with the caches emptied (every JIT kernel is built anew) and a PATH without ninja.
  # It is expected to fail; the log is what is kept.
  M=/var/lib/sglang-models/${CAPTURE_MODEL:-qwen3-30b-a3b}
  C=/tmp/capture && rm -rf $C && mkdir -p $C && chown sglang $C 2>/dev/null
  command -v ninja >/dev/null && echo "note: ninja at $(command -v ninja) is not on the capture's PATH"
  runuser -u sglang -- env -i HOME=$C HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 \
    PATH=/usr/local/cuda/bin:/usr/bin:/bin CUDA_HOME=/usr/local/cuda FLASHINFER_WORKSPACE_BASE=$C/fi \
    TVM_FFI_CACHE_DIR=$C/tvm-ffi TRITON_CACHE_DIR=$C/triton SGLANG_CACHE_DIR=$C/sglang \
    timeout "${CAPTURE_S:-240}" /opt/sglang/venv/bin/python -m sglang.launch_server --model-path "$M" \
    --load-format dummy --host 127.0.0.1 --port 30990 --grammar-backend none --attention-backend triton \
    > /tmp/capture-no-ninja.log 2>&1
  echo "capture rc=$? ($(wc -l < /tmp/capture-no-ninja.log) lines)"
  grep -nE "No such file|FileNotFoundError|Traceback|hit an exception|sigquit|ready to roll" /tmp/capture-no-ninja.log | head -20
  ;;
profile)
  # Issue 25's M3/M6: torch-profiler traces of decode steps (benchmarks/profile_decode.py), with the
  # venv and model folder the sweep left, outside the units (a measurement, not a service), as the
  # service user with its home, so that the JIT kernels the sweep built are not built again.
  M=${PROFILE_MODEL:-qwen3-30b-a3b}; P=/tmp/prof-$M
  rm -rf $P && mkdir -p $P && cp benchmarks/profile_decode.py $P/ && chown -R sglang $P
  runuser -u sglang -- env HOME=/var/lib/sglang CUDA_HOME=/usr/local/cuda CUDA_VISIBLE_DEVICES=0 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PATH=/opt/sglang/venv/bin:/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/bin:/bin \
    timeout "${PROFILE_S:-540}" python3 $P/profile_decode.py run --python /opt/sglang/venv/bin/python \
    --model-path /var/lib/sglang-models/$M --out $P --points "${POINTS:-1x256,64x256,32x2048,8x7680}" -- \
    --tp-size 1 --mem-fraction-static 0.88 --attention-backend triton --grammar-backend none \
    --context-length 8192 --max-running-requests 64 ${PROFILE_ARGS:-}
  echo "profile rc=$?"; tail -3 $P/server.log
  mkdir -p $OUT/prof-$M && cp $P/*.json $OUT/prof-$M/ && cp $P/traces/* $OUT/prof-$M/ 2>/dev/null
  gzip -c $P/server.log > $OUT/prof-$M/server.log.gz; ls -la $OUT/prof-$M
  ;;
pack)
  mkdir -p $OUT; rm -rf $OUT/live  # poll's copies: the pack holds them whole
  cp /tmp/gpu-sweep.log /tmp/task-times.jsonl /tmp/capture-no-ninja.log /tmp/keyed.log /tmp/keyed-probe.log $OUT/ 2>/dev/null
  tar czf $OUT/results.tgz results build/plan /var/lib/sglang/run/*.log 2>/dev/null; ls -la $OUT
  ;;
esac
