"""Clip-higher (DAPO) against the symmetric PPO clip, with two advantage estimators, on SmolLM2.

Four trials of experiments/configs/grpo_smollm2.py:plain (about 25 minutes each on a 2-core CPU):
  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/smollm2_clip.py --sweep_dir runs/smollm2_clip --parallel 1
then `python -m jaxrl_llm.plots runs/smollm2_clip --out runs/smollm2_clip/plots`.
`:plain`: the main job without the "stable" recipe it took on 2026-11-28 (jaxrl_llm.recipes);
these runs predate it.
"""

from jaxrl_llm.sweeps import axis, product


def sweep():
    return product(axis("loss.clip_high", [0.2, 0.28]), axis("loss.advantage", ["grpo", "rloo"]))
