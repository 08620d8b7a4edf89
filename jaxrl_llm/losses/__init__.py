"""Pure loss functions of arrays for RL post-training of language models.

Each loss takes arrays first and hyper-parameters keyword-only, checks shapes at trace time, and
returns `(loss, metrics)`. Nothing here knows about models, meshes or configs. The table of
losses, formulas and peer conventions is docs/losses.md. The accepted option names live next to
their functions: `aggregation.AGG_MODES`, `kl.KL_ESTIMATORS`, `preference.DPO_LOSS_TYPES`,
`off_policy.IS_LEVELS` and `off_policy.IS_MODES`.
"""

from jaxrl_llm.losses.aggregation import (
    AggSums,
    aggregate,
    aggregate_count,
    aggregate_sums,
    masked_mean,
)
from jaxrl_llm.losses.covariance import clip_cov_selection, token_covariance
from jaxrl_llm.losses.kl import kl, kl_loss
from jaxrl_llm.losses.off_policy import aipo, importance_weights
from jaxrl_llm.losses.policy import cispo, entropy_bonus, gspo, ppo_clip, reinforce
from jaxrl_llm.losses.preference import dpo, kto, orpo, rrhf, simpo
from jaxrl_llm.losses.ratios import ratio_metrics
from jaxrl_llm.losses.shaping import (
    AdaptiveKLState,
    adaptive_kl_init,
    adaptive_kl_update,
    kl_in_reward,
    last_token_rewards,
    overlong_penalty,
    step_token_rewards,
)
from jaxrl_llm.losses.value import value_loss

__all__ = [
    # aggregation
    "AggSums",
    "aggregate",
    "aggregate_count",
    "aggregate_sums",
    "masked_mean",
    # covariance (Clip-Cov)
    "clip_cov_selection",
    "token_covariance",
    # kl
    "kl",
    "kl_loss",
    # policy
    "cispo",
    "entropy_bonus",
    "gspo",
    "ppo_clip",
    "ratio_metrics",
    "reinforce",
    # value
    "value_loss",
    # off-policy
    "aipo",
    "importance_weights",
    # preference
    "dpo",
    "kto",
    "orpo",
    "rrhf",
    "simpo",
    # shaping
    "AdaptiveKLState",
    "adaptive_kl_init",
    "adaptive_kl_update",
    "kl_in_reward",
    "last_token_rewards",
    "overlong_penalty",
    "step_token_rewards",
]
