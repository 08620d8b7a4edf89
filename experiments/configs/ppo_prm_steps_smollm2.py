"""Gao et al.'s setting, small: PPO with dense process rewards on a task whose answers take
several lines ("On Designing Effective RL Reward at Training Time for LLM Reasoning", 2410.15115;
docs/process_rewards.md). One file, three stages on the same task (`chain_sum_steps`: four or
five one-digit terms, asked for one operation a line, `jaxrl_llm.data.presets.STEP_INSTRUCTION`;
96 new tokens, room for repeated steps); the argument after ":" picks the stage:

    # 1. SFT on worked solutions ("0 - 4 = -4\\n-4 - 8 = -12\\n...\\nThe answer is -13."): the base
    #    model writes one line and is right 2% of the time on this task (presets.py)
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_smollm2.py:sft \\
        --workdir runs/prm_steps/sft
    # 2. the process reward model (Math-Shepherd labels by Monte Carlo completion) from the SFT
    #    policy; held-out step accuracy against the constant predictor in its summary.json
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_smollm2.py:prm \\
        --workdir runs/prm_steps/prm
    # 3. PPO from the SFT policy, the PRM's refined step rewards on each step's last token and
    #    the verifier's on the final one (GAE): success only, + raw PRM, + Clip, + Delta, 3 seeds
    python -m jaxrl_llm.launch --config experiments/configs/ppo_prm_steps_smollm2.py \\
        --sweep experiments/sweeps/prm_refinement.py --sweep_dir runs/prm_refinement \\
        --seeds 0,1,2 --parallel 1
    python -m jaxrl_llm.report runs/prm_refinement --metric reward/process_steps \\
        --metric completion/length --out docs/reports/prm_refinement
    # an outcome reward model from the SFT policy, on the same task and length (for PPO against
    # a learned outcome reward: from_sft_smollm2.py:ppo_rm)
    python -m jaxrl_llm.main --config experiments/configs/ppo_prm_steps_smollm2.py:rm \\
        --workdir runs/prm_steps/rm

`reward/process_steps` (steps per completion, what the hack raises), `completion/length` and
`reward/process` are logged every step. To start from the base model instead of the SFT policy,
add --config.model.name=smollm2-135m-instruct to stages 2 and 3.
"""

from jaxrl_llm.config import config_for
from jaxrl_llm.config_files import sibling_config
from jaxrl_llm.data.presets import STEP_INSTRUCTION
from jaxrl_llm.data.sft import STEPS_RESPONSE_TEMPLATE

WORKDIR = "runs/prm_steps"
SFT_MODEL = f"{WORKDIR}/sft/model"
PROCESS_MODEL = f"{WORKDIR}/prm/process_reward_model"
OUTCOME_MODEL = f"{WORKDIR}/rm/reward_model"  # what the `:rm` stage writes
MAX_NEW_TOKENS = 96  # 3-4 operation lines and the answer take about 45; the rest allows repeats
STAGES = ("sft", "prm", "rm", "rl")


def task_fields(config) -> None:
    """The task every stage shares: the multi-line preset, one operation a line."""
    config.task.name = "chain_sum_steps"
    config.task.instruction_suffix = STEP_INSTRUCTION
    config.eval.max_new_tokens = MAX_NEW_TOKENS


def _reward_model_stage(file_name: str, section: str):
    """A reward-model stage of `file_name` beside this one, on this task, from the SFT policy,
    sampling as long as the RL stage (`config.<section>.max_new_tokens`)."""
    config = sibling_config(__file__, file_name)
    with config.unlocked():
        task_fields(config)
        config.model.name = SFT_MODEL
        config[section].max_new_tokens = MAX_NEW_TOKENS
    return config


def get_config(stage: str = "rl"):
    """The config of `stage`: "sft", "prm" (the process reward model), "rm" (an outcome reward
    model) or "rl" (PPO, dense)."""
    if stage not in STAGES:
        raise ValueError(f"ppo_prm_steps_smollm2.py:{stage}: the stage must be one of {STAGES}.")
    if stage == "sft":  # sft_smollm2.py's schedule, on worked solutions of this task
        config = sibling_config(__file__, "sft_smollm2.py")
        with config.unlocked():
            task_fields(config)
            config.sft.response_template = STEPS_RESPONSE_TEMPLATE
        return config
    if stage == "prm":  # prm_smollm2.py's schedule, from the SFT policy, at this length
        config = _reward_model_stage("prm_smollm2.py", "prm")
        with config.unlocked():
            # The target asks the margin over the constant predictor to be supported by its
            # interval, which resamples held-out prompts. 128 prompts x eval_fraction 0.25 (32
            # held out) and 80 updates (~1.7 epochs) gave +4.8 points [-10.3, +20.6] at the end,
            # and the held-out accuracy fell after the first epoch (+10.1 at update 40, -3.2 at
            # 60: the PRM overfit 384 completions; 2026-12-01, docs/process_rewards.md). So 4x the
            # prompts: 128 held out (about half the interval's width) and 1,536 training
            # completions, 160 updates of 8 (~0.8 epochs). Labelling takes ~45 min on 2 cores.
            config.prm.num_prompts = 512
            config.prm.eval_fraction = 0.25
            config.train.num_steps = 160
            config.train.checkpoint_every = 80
            config.prm.eval_every = 40
            config.prm.max_length = 256
        return config
    if stage == "rm":  # rm_smollm2.py's schedule, from the SFT policy, at this length
        return _reward_model_stage("rm_smollm2.py", "rm")
    config = config_for("ppo")
    with config.unlocked():
        task_fields(config)
        config.model.name = SFT_MODEL
        config.rollout.max_new_tokens = MAX_NEW_TOKENS
        config.rewards.process_model = PROCESS_MODEL
        config.rewards.process_placement = "dense"
        config.rewards.process_refinement = "none"  # the sweep sets none / clip / delta
        config.rewards.process_eta = 0.5
        config.rewards.count_steps = True  # the success-only arm logs steps per completion too
        # GAE's lambda 1 (returns-to-go minus the critic's value), not PPO's 0.95. With 0.95
        # and a fresh critic (V ~ 0), a final-token reward reaches token t as 0.95^(L-1-t) s:
        # about 0.13 s at the first of ~40 tokens. Whitening then subtracts the batch's token
        # mean (about 0.3 when 70% of the SFT policy's samples are right), so the first 16
        # tokens of every *correct* completion get a negative advantage. The success-only arm
        # at 0.95 fell from 72% right samples to 9% in three updates and ended at 38.5% held
        # out from 62.5% (2026-12-01, records docs/reports/runs/prm_refinement/lam_095). This
        # is the value-initialisation bias of "What's Behind PPO's Collapse in Long-CoT? Value
        # Optimization Holds the Secret" (VC-PPO, 2503.01491), which takes lambda 1 for the
        # critic's targets; here it is one lambda for both: step rewards still credit only
        # the tokens before them, and the return of a trajectory is what Clip / Delta bound.
        config.loss.lam = 1.0
        # A third of PPO's actor rate (3e-5). At 3e-5 and lambda 1 the sampled accuracy still
        # fell from 72% to 12% by the fourth step (after three updates) and the summed
        # KL to the SFT policy reached ~5 nats a completion: Adam moves every weight by about
        # the rate whatever the gradient, and the SFT policy is peaked (entropy 0.02 a token).
        config.optimizer.learning_rate = 1e-5
        config.train.num_steps = 30
    return config
