"""Prompt sources (reasoning-gym, JSONL, tfds), chat rendering and resumable batching.

Every source is a finite, indexable collection of `Example`s; `Example.score(candidate)` applies the
source's own scorer to an extracted answer.

Example:
  >>> from jaxrl_llm import data
  >>> source = data.task_source("gcd", seed=0, size=1000, split="train")  # numbers up to 67
  >>> batcher = data.PromptBatcher(source, batch_size=8, seed=0)
  >>> prompts = [data.render_prompt(tokenizer, ex.question) for ex in next(batcher)]
"""

from jaxrl_llm.data.batcher import PromptBatcher, PromptSource
from jaxrl_llm.data.example import Example, Scorer, question_id
from jaxrl_llm.data.jsonl import JsonlRecord, JsonlSource, final_answer, read_prompt_jsonl
from jaxrl_llm.data.presets import (
    TaskPreset,
    register_preset,
    resolve_task,
    task_names,
    task_pool,
    task_source,
)
from jaxrl_llm.data.problem_keys import problem_key_for, register_problem_key
from jaxrl_llm.data.prompts import ChatTemplate, render_prompt
from jaxrl_llm.data.reasoning_gym_source import ReasoningGymSource, reasoning_gym_tasks
from jaxrl_llm.data.scoring import (
    math_answer_score,
    math_equal,
    normalize_number,
    parse_math,
    verify_parsed,
)
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    SIDES,
    SideIndex,
    Sides,
    distinct_questions,
    normalize_question,
    partition,
    side_of,
)
from jaxrl_llm.data.tfds_source import JsonlPromptBuilder, TfdsSource

__all__ = [
    "ChatTemplate",
    "DEFAULT_HELD_OUT_FRACTION",
    "DEFAULT_SELECTION_FRACTION",
    "Example",
    "JsonlPromptBuilder",
    "JsonlRecord",
    "JsonlSource",
    "PromptBatcher",
    "PromptSource",
    "ReasoningGymSource",
    "SIDES",
    "Scorer",
    "SideIndex",
    "Sides",
    "TaskPreset",
    "TfdsSource",
    "distinct_questions",
    "final_answer",
    "math_answer_score",
    "math_equal",
    "normalize_number",
    "normalize_question",
    "parse_math",
    "partition",
    "problem_key_for",
    "question_id",
    "read_prompt_jsonl",
    "reasoning_gym_tasks",
    "register_preset",
    "register_problem_key",
    "render_prompt",
    "resolve_task",
    "side_of",
    "task_names",
    "task_pool",
    "task_source",
    "verify_parsed",
]
