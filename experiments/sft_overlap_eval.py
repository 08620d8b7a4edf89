"""Held-out accuracy split by overlap with the training prompts (docs/pipeline.md).

    python experiments/sft_overlap_eval.py [MODEL ...]    # default: the base model and runs/sft_smollm2/model

chain_sum's held-out prompts are drawn with another seed than its training prompts, but many
questions repeat; this scores each model (greedy, `config.eval`) on the held-out questions that
never occur in the training pool and on those that do, so a supervised stage's gain can be read
on questions it cannot have seen.
"""

import os
import sys

from jaxrl_llm.data.presets import task_source
from jaxrl_llm.evals import EvalSet, Evaluator
from jaxrl_llm.models import from_pretrained
from jaxrl_llm.runners import components
from jaxrl_llm.runners.evaluation import eval_settings
from jaxrl_llm.stages import load_config

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "sft_smollm2.py")


def main(models):
    config = load_config(CONFIG)
    task = config.task
    kwargs = task.kwargs.to_dict()
    pool = {
        e.question
        for e in task_source(task.name, seed=config.seed, size=task.train_size, overrides=kwargs)
    }
    held = list(task_source(task.name, seed=task.eval_seed, size=task.eval_size, overrides=kwargs))
    unseen = [e for e in held if e.question not in pool]
    seen = [e for e in held if e.question in pool]
    print(
        f"| model | {len(unseen)} held-out questions not in the training pool | {len(seen)} in it |"
    )
    print("| --- | --- | --- |")
    for name in models:
        model, tokenizer = from_pretrained(name)
        evaluator = Evaluator(
            model, tokenizer, components.build_scorer(config), eval_settings(config)
        )
        result = evaluator([EvalSet("unseen", unseen), EvalSet("seen", seen)])
        print(f"| {name} | {result['unseen']['accuracy']:.1%} | {result['seen']['accuracy']:.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m-instruct", "runs/sft_smollm2/model"])
