"""RL that improves an SFT policy: four methods (GRPO at two settings) from the same start, at
one budget. Every method starts from the chain_sum_steps SFT policy (`runs/prm_steps/sft/model`,
ppo_prm_steps_smollm2.py's `:sft` stage: 56.5% held-out greedy accuracy, docs/ppo.md), trains on
that config's task and prompt (`task_fields`) and is measured on the same held-out problems
(the test side, `eval.scorer = "stated"`, and the selection side, `eval.selection`). The
argument after ":" picks the method:

    # the start, once (about 40 min on a 2-core CPU)
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_smollm2.py:sft \\
        --workdir runs/prm_steps/sft
    # one method, one seed (the table's 3 seeds: experiments/sweeps/from_sft_methods.py)
    python -m jaxrl_llm.main --config experiments/configs/from_sft_smollm2.py:ppo \\
        --workdir runs/from_sft_single/ppo

- `:grpo`: the main job's recipe (grpo_smollm2.py, "stable": dynamic sampling, KL 0.04, cosine
  rate 3e-5, temperature 1, an entropy floor).
- `:grpo_best`: the same recipe at the setting the GRPO probes chose on the selection side,
  BEST_GRPO (experiments/sweeps/grpo_sft_probes.py; the recipe's rate fell 22 points from this
  start, docs/ppo.md).
- `:ppo`: success-only PPO (the verifier's reward alone, no process reward model) at the best
  setting, BEST_PPO: ppo_prm_steps_smollm2.py's (lambda 1, temperature 0.7) at the rate the
  probes chose on the selection side (3e-6; 1e-5 fell, docs/ppo.md), with advantage
  whitening, a reference that follows the policy as a moving average and value pretraining
  (Xu et al. 2404.10719, VC-PPO 2503.01491), at the table's batch; BEST_PPO's larger batch
  is one lever of experiments/sweeps/ppo_lever_ablation.py, whose "large batch" arm is this.
- `:online_dpo`: online DPO (online_dpo_smollm2.py: the best / worst sample of each group, rate
  1e-5, temperature 0.7; the reference is the SFT policy).
- `:dpo`: offline DPO (dpo_smollm2.py: sigmoid, beta 0.1, rate 5e-6) on pairs of the SFT
  policy's own samples at temperature 1, labelled by the verifier, made before training.

Two more arms start from the same policy from the PPO baseline that gains (docs/pipeline.md):
BEST_PPO at its own batch (16 prompts a step as 2 micro-batches, 1,920 sampled completions in
30 steps; at the table's batch of 8 its gain did not clear 0) with a learned reward.

- `:ppo_prm`: BEST_PPO plus the process reward model's step rewards placed densely (the `:prm`
  stage of ppo_prm_steps_smollm2.py); experiments/sweeps/prm_refinement.py sets the refinement
  (none, Clip, Delta), and its success-only arm is BEST_PPO itself, the first arm of
  experiments/sweeps/ppo_lever_ablation.py, whose runs serve (Gao et al. 2410.15115).
- `:ppo_rm`: PPO against the outcome reward model alone (the `:rm` stage; the verifier only
  measures), with the library's levers against over-optimisation: each step's scores whitened,
  a KL penalty to the SFT policy itself (the reference frozen there, not BEST_PPO's moving
  average, which would follow a hacking policy), and a stop after 3 steps in a row where the
  model ranks the verifier's right samples above its wrong ones with an AUC under 0.6
  (Gao, Schulman and Hilton 2210.10760 on over-optimisation; InstructGPT's KL 2203.02155).

The budget is matched in sampled completions and in pair updates. Each online method samples
STEPS x PROMPTS x GROUP = 30 x 8 x 4 = 960 completions of the current policy and makes 30
updates (one minibatch a step). Offline DPO samples 120 prompts x 8 = 960 completions of the
SFT policy once (a fifth of the prompts' pairs held out), then makes 30 updates of 8 pairs:
online DPO's 30 steps of one pair per prompt. What each method discards of the 960 differs by
design: GRPO's dynamic sampling replaces groups whose rewards all tie (up to 3 rounds a step,
so it may sample up to 2,880, `stabilise/sampling_rounds`), online DPO gives a tied group's pair
weight 0, offline DPO pairs only groups with a right and a wrong sample. Each keeps its own
rate and temperature (none was tuned for this start).

The online methods evaluate both sides every EVAL_EVERY = 5 steps. Offline DPO logs its held-out
pairs' loss and reward accuracy every 5 updates and the task's greedy accuracy on both sides (the
same problems and scorer, logged as the online runs log it) before and after its updates, so
`jaxrl_llm.report` puts it in the same table.
"""

from jaxrl_llm.config import apply_overrides
from jaxrl_llm.config_files import sibling_config, sibling_module

# The start and the task are ppo_prm_steps_smollm2.py's (its :sft stage writes the policy).
_STEPS_CONFIG = sibling_module(__file__, "ppo_prm_steps_smollm2.py")
SFT_MODEL = _STEPS_CONFIG.SFT_MODEL
MAX_NEW_TOKENS = _STEPS_CONFIG.MAX_NEW_TOKENS

METHODS = ("grpo", "grpo_best", "ppo", "online_dpo", "dpo")
# The budget (module docstring): online steps x prompts a step x completions a prompt, and the
# offline samples per prompt; offline DPO's prompts are what makes its samples the same count.
STEPS, PROMPTS, GROUP = 30, 8, 4
SAMPLED_COMPLETIONS = STEPS * PROMPTS * GROUP
DPO_SAMPLES_PER_PROMPT = 8
DPO_PROMPTS = SAMPLED_COMPLETIONS // DPO_SAMPLES_PER_PROMPT
EVAL_EVERY = 5

# PPO's best setting from this start, chosen on the selection side (docs/ppo.md): the probes'
# rate and the levers of Xu et al. and VC-PPO. The methods table runs it at its own batch
# (BATCH_KEYS at PROMPTS a step, one micro-batch); the lever ablation as it is.
BEST_PPO = {
    "optimizer.learning_rate": 3e-6,  # 1e-5 fell 13 points in 12 steps, 3e-6 gained
    "loss.whiten_advantages": True,
    # 16 prompts x 4 completions a step, as 2 micro-batches of 32 rows (the memory of one)
    "rollout.num_prompts": 16,
    "train.grad_accumulation": 2,
    # the reference about 1 / (1 - 0.9) = 10 actor updates behind the policy
    "reference.ema_decay": 0.9,
    # 4 critic-only batches of Monte Carlo returns before step 1
    "critic.pretrain_steps": 4,
}
BATCH_KEYS = ("rollout.num_prompts", "train.grad_accumulation")

# GRPO's best setting from this start: the main job's recipe with the probe that ended highest
# on the selection side (experiments/sweeps/grpo_sft_probes.py, 12 steps, one seed; docs/ppo.md).
# The recipe's rate, 3e-5, fell 22 points in 30 steps; PPO's chosen rate held and gained.
BEST_GRPO = {"optimizer.learning_rate": BEST_PPO["optimizer.learning_rate"]}

# `:ppo_rm`'s levers against over-optimising the outcome reward model (module docstring).
OUTCOME_RM_LEVERS = {
    "rewards.model": _STEPS_CONFIG.OUTCOME_MODEL,
    "rewards.task_weight": 0.0,  # the verifier measures, it does not reward
    "rewards.model_whiten": True,
    "reference.ema_decay": 0.0,  # the KL is to the SFT policy, which stays the reference
    "loss.kl_beta": 0.05,
    "rewards.model_check_auc": 0.6,
    "rewards.model_check_steps": 3,
    "rewards.model_check_action": "stop",
}
# What each PPO config sets on the best setting: nothing (success only, the process-reward
# sweep's first arm), the process model's step rewards placed densely, or the outcome model.
PPO_ARMS = {
    "ppo": {},
    "ppo_prm": {
        "rewards.process_model": _STEPS_CONFIG.PROCESS_MODEL,
        "rewards.process_placement": "dense",
    },
    "ppo_rm": OUTCOME_RM_LEVERS,
}
LEARNED_REWARD_ARMS = tuple(arm for arm in PPO_ARMS if arm != "ppo")


def check_method(method: str, file: str, choices=METHODS) -> None:
    """Raises ValueError, one line naming the choices, for an argument after ':' not in them."""
    if method not in choices:
        raise ValueError(
            f"{file}:{method}: the method must be one of {', '.join(choices)}, e.g. {file}:ppo."
        )


def _online(file_name: str, *args):
    """An online config of `file_name` beside this one, from the SFT policy at the budget."""
    config = sibling_config(__file__, file_name, *args)
    with config.unlocked():
        config.rollout.num_prompts = PROMPTS
        config.rollout.group_size = GROUP
        config.rollout.max_new_tokens = MAX_NEW_TOKENS
        config.train.num_steps = STEPS
        config.eval.every = EVAL_EVERY
    return config


def _method_config(method: str):
    if method == "grpo":  # the main job's config, its "stable" recipe
        return _online("grpo_smollm2.py")
    if method == "grpo_best":  # the same at the probes' setting
        return apply_overrides(_online("grpo_smollm2.py"), BEST_GRPO)
    if method in PPO_ARMS:
        success_only = {"rewards.process_model": "", "rewards.process_placement": "summed"}
        # `:ppo` at the table's batch (one micro-batch); the learned-reward arms at BEST_PPO's
        # own batch, the PPO baseline that gains (docs/ppo.md)
        best = BEST_PPO
        if method == "ppo":
            best = {k: v for k, v in BEST_PPO.items() if k not in BATCH_KEYS}
        config = _online("ppo_prm_steps_smollm2.py", "rl")
        return apply_overrides(config, {**success_only, **best, **PPO_ARMS[method]})
    if method == "online_dpo":
        return _online("online_dpo_smollm2.py")
    config = sibling_config(__file__, "dpo_smollm2.py")
    with config.unlocked():
        p = config.preference
        p.pairs = ""  # made from the SFT policy's samples, labelled by the verifier
        p.num_prompts, p.group_size = DPO_PROMPTS, DPO_SAMPLES_PER_PROMPT
        p.max_new_tokens = MAX_NEW_TOKENS
        p.max_length = 256  # the prompt and 96 new tokens, as the PRM stage's items
        p.batch_size = PROMPTS  # online DPO's pairs an update (one a prompt)
        p.eval_every = EVAL_EVERY
        config.train.num_steps = STEPS
    return config


def get_config(method: str = "grpo"):
    """The config of `method` ("grpo", "grpo_best", "ppo", "online_dpo" or "dpo"), or of a
    learned-reward arm ("ppo_prm", "ppo_rm"), from the SFT policy."""
    check_method(method, "from_sft_smollm2.py", (*METHODS, *LEARNED_REWARD_ARMS))
    config = _method_config(method)
    with config.unlocked():
        _STEPS_CONFIG.task_fields(config)
        config.model.name = SFT_MODEL
        # 15 runs of the table: one checkpoint each (SmolLM2's GRPO state is 1.5 GB; PPO's
        # adds a critic), written every 10 steps.
        config.train.checkpoint_every = 10
        config.train.keep_checkpoints = 1
    return config
