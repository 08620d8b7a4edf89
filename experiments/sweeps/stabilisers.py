"""The stabiliser sweep: which stabilisers keep the default recipe learning (docs/recipe.md).

Each setting runs on the two tuning tasks with three seeds, held-out accuracy every 5 steps; the
baseline (today's default) is the main job and the transfer table's gcd runs
(experiments/sweeps/transfer_tasks.py). One process at a time on a 2-core CPU, resumable, setting
by setting (its chain_sum seeds, then its gcd seeds), a setting's remaining trials skipped once
one of its runs ends more than 3 points below its own best or keeps less than a third of its
first sampled entropy (it can no longer be chosen):

  python -m jaxrl_llm.launch --config experiments/configs/grpo_smollm2.py:plain \
      --sweep experiments/sweeps/stabilisers.py --seeds 0,1,2 --set eval.every=5 \
      --sweep_dir runs/seeds/stabilisers --parallel 1 --prune_drop 3 --prune_entropy 0.333
  python -m jaxrl_llm.report runs/seeds/stabilisers --choose_across task. \
      --min_entropy_ratio 0.333 --out docs/reports/stabilisers

The new default is the setting whose worst seed ends within 3 points of its own best
evaluation and whose mean gain is highest: `--choose_across task.` joins each
setting's two tasks and applies that rule. `--min_entropy_ratio 0.333` adds the issue's
done-when for the default, a final sampled entropy of at least a third of the first: a setting
that loses more cannot become a default that meets it. Every setting's first run failed that
criterion (docs/recipe.md), so the later runs go under the drop rule alone (relaunched without
`--prune_entropy`) and the report shows each one's entropy against the done-when. The leading
setting (KL, cosine rate, temperature 1: +32.3 on chain_sum over 3 seeds) was put out by its
gcd seed 1, 3.5 points under its best; `--only 42,30,36` runs the remaining first runs, the
entropy-floor variant first. The entropy-floor variant's first run kept 0.23 of its entropy, so a
ninth setting with a stronger floor (trials 048-053) ran its first trial next (`--only
48,44-47`); that run was the first within both rules (+28.0, drop 1.0, entropy kept 0.47), and
the eighth and Dr. GRPO's settings had each kept under a third on their first runs, so the
ninth's other runs go first: `--only 49-53,44-47,37-41`. The ninth's second run ended 4.0 under
its best; a tenth setting (trials 054-059) follows the eighth's gcd seeds, each setting's gcd
seeds before its chain_sum ones (gcd put the leading setting out):
`--only 45,46,47,44,57,58,59,54,55,56,21,22,23,19,20,39,40,41,37,38`. The eighth setting's six
runs all ended within the drop rule (2026-11-28), the first setting to qualify; after trial 057
the transfer table runs with it (docs/recipe.md), then `--only
57,58,59,54,55,56,21,22,23,19,20,39,40,41,37,38`. The eighth setting became the main job's
recipe ("stable", jaxrl_llm.recipes); every setting here is written as changes to the main job's
config before it, which `grpo_smollm2.py:plain` gives (the same config as at commit 9c0e825).
"""

from jaxrl_llm.sweeps import axis, concat, fixed, product

# The verifiers without the hacks the transfer table showed (gcd's and letter_counting's constant
# answers, lcm's copied input, README): in every setting, and alone as the first.
VERIFIERS = {"rewards.answer_rule": "stated", "rewards.chance_correction": True}
DYNAMIC = {**VERIFIERS, "stabilise.dynamic_sampling": True, "stabilise.max_sampling_rounds": 3}
ENTROPY = {"stabilise.entropy_target": 0.5, "loss.entropy_coef": 0.001}
SETTINGS = concat(
    # the verifiers alone: today's default without the hacks
    fixed(VERIFIERS),
    # dynamic sampling alone: every group of a step carries a gradient
    fixed(DYNAMIC),
    # + the soft overlong penalty and an entropy floor (the collapse the progress bar shows)
    # (a 6-token ramp before the 32-token limit: DAPO's L_cache / L_max is 4096 / 20480)
    fixed(
        {**DYNAMIC, **ENTROPY, "stabilise.overlong": "soft", "stabilise.overlong_cache_tokens": 6}
    ),
    # + KL to the initial policy (k3, as DeepSeekMath) and a cosine-decaying rate
    fixed({**DYNAMIC, "loss.kl_beta": 0.04, "optimizer.schedule": "cosine"}),
    # Added after the first four settings' first runs: the last (KL and a cosine rate) ended at
    # its best but kept 0.22 of its sampled entropy, the others 0.07. The same at temperature 1,
    # as DAPO and DeepSeekMath sample: the loss is of the tempered policy (logits / T), so at 0.7
    # each step sharpens a distribution already sharper than the model's; at 1 the samples are
    # the model's own. Run before the two below, which have no entropy control.
    fixed(
        {
            **DYNAMIC,
            "loss.kl_beta": 0.04,
            "optimizer.schedule": "cosine",
            "rollout.temperature": 1.0,
        }
    ),
    # a lower rate with dynamic sampling (3e-5 collapsed chain_sum at 5e-5 before)
    fixed({**DYNAMIC, "optimizer.learning_rate": 2e-5}),
    # group advantages not divided by the group's std (Dr. GRPO, arXiv:2503.20783): the chance
    # correction's small spread inside an all-wrong group (-0.03 to 0 on chain_sum) stays small
    # instead of being scaled to full-size advantages (docs/recipe.md)
    fixed({**DYNAMIC, "loss.normalize_std": False}),
    # Added after the leading setting's first two seeds (KL, cosine rate, temperature 1: +36.0
    # and +28.0, at their best at the end) kept 0.19 and 0.09 of their first sampled entropy,
    # under the third the done-when asks. The same with an entropy floor held by the adaptive
    # coefficient: target 0.7 nats (a third of the base model's 1.92 at temperature 1 is 0.64),
    # started at 0.005, stepped twice as fast as the default, and never below 0.005 (the third
    # setting's weight fell while entropy was above its target, then from there had only
    # reached 0.027 when its entropy was down to 0.05; a first try of this one without the
    # floor had its weight at 1e-6 by step 6). Last in the plan, so that the trial numbers
    # above stay as run.
    fixed(
        {
            **DYNAMIC,
            "loss.kl_beta": 0.04,
            "optimizer.schedule": "cosine",
            "rollout.temperature": 1.0,
            "stabilise.entropy_target": 0.7,
            "stabilise.entropy_rate": 1.0,
            "stabilise.entropy_min_coef": 0.005,
            "loss.entropy_coef": 0.005,
        }
    ),
    # Added after the eighth setting's first run (chain_sum seed 0: +33.5, drop 2.5) kept 0.23
    # of its entropy: its weight sat at the 0.005 floor while entropy was above 0.7 (steps 1-12),
    # then took 7 steps to reach its 0.05 ceiling, by which time entropy was down to 0.09-0.44
    # and stayed there: 0.05 per nat is weak against a policy-gradient term whose advantages are
    # of order 1 per token. The same with a floor 4x higher (0.02), a ceiling 10x higher (0.5),
    # twice the step (rate 2: x1.8 a step at 0.3 nats under, x0.14 at 1 nat over, so a weight
    # that overshoots falls back within a step or two) and a target of 0.9 nats, clear of the
    # done-when's third of the base model's 1.92 (0.64) by more than the step-to-step spread
    # the runs show (0.1-0.3).
    fixed(
        {
            **DYNAMIC,
            "loss.kl_beta": 0.04,
            "optimizer.schedule": "cosine",
            "rollout.temperature": 1.0,
            "stabilise.entropy_target": 0.9,
            "stabilise.entropy_rate": 2.0,
            "stabilise.entropy_min_coef": 0.02,
            "stabilise.entropy_max_coef": 0.5,
            "loss.entropy_coef": 0.02,
        }
    ),
    # Added after the ninth setting's second run ended 4.0 points under its best: the drops are
    # made between steps 20 and 25 (a cosine rate has all but stopped the greedy policy after
    # step 25: 0-1 answers of 200 change in nine of ten such runs), by updates at 0.28-0.11 of
    # the peak rate (this comment first said half or more: a miscount of the cosine), and the
    # leading setting's two gcd seeds ended 3.0 and 3.5 under theirs. The leading setting at
    # 2e-5: a third less movement at every step, the lever left that acts where the drops are
    # made (its chain_sum seeds gained 28-36 points, room to give some up). Out on its first
    # run (gcd seed 0: 6.5 under its best, the drop made between steps 15 and 20).
    fixed(
        {
            **DYNAMIC,
            "loss.kl_beta": 0.04,
            "optimizer.schedule": "cosine",
            "rollout.temperature": 1.0,
            "optimizer.learning_rate": 2e-5,
        }
    ),
)


def sweep():
    return product(SETTINGS, axis("task.name", ["chain_sum", "gcd"]))
