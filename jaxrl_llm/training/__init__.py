"""Training pieces shared by every algorithm: log-probs, optimizer, train state and step."""

from jaxrl_llm.training.logprobs import sequence_logprobs
from jaxrl_llm.training.optimizer import (
    check_update_precision,
    learning_rate_schedule,
    make_optimizer,
    smallest_kept_update,
)
from jaxrl_llm.training.train_step import (
    TrainState,
    create_train_state,
    make_train_step,
)

__all__ = [
    "TrainState",
    "check_update_precision",
    "create_train_state",
    "learning_rate_schedule",
    "make_optimizer",
    "make_train_step",
    "sequence_logprobs",
    "smallest_kept_update",
]
