"""Two trials on the tiny config: GRPO's group-normalised advantages against RLOO's leave-one-out.

The CI sweep (tests/workflow/test_sweep_launch.py):
  python -m jaxrl_llm.launch --config experiments/configs/grpo_tiny.py \
      --sweep experiments/sweeps/tiny_estimators.py --sweep_dir runs/tiny_estimators --parallel 2
"""

from jaxrl_llm.sweeps import axis, zipped


def sweep():
    # Distinct seeds too: the tiny random model earns no task reward, so both estimators give zero
    # advantages there, and only the seed (initial weights, samples) tells the trials apart.
    return zipped(axis("loss.advantage", ["grpo", "rloo"]), axis("seed", [0, 1]))
