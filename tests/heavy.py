"""The `heavy` target: tests that take 35 s or more each on a 2-core CPU and whose coverage the
default run keeps in a faster form. `tests/conftest.py` marks them `heavy`; the default run
leaves them out (pyproject's addopts), `bash scripts/test.sh -m heavy` runs them (two workers,
like the default run) and CI runs them after the default target.

Chosen from `pytest --durations=0` of the whole suite (2026-11-28, AMD EPYC, 2 cores, beside a
training run): the default run took 40 min on CI with them, against the 20 its budget allows;
without them, an estimated 18. Each group says what the default run keeps of its coverage.
Entries are node-id prefixes (a prefix takes every parametrization it starts).
"""

from __future__ import annotations

HEAVY_GROUPS: dict[str, tuple[str, ...]] = {
    # Whole runs of the tiny model through a runner: the default run keeps one whole GRPO run
    # with its resume (tests/runners/test_grpo_run.py), the PRM stage
    # (test_process_reward_model_run.py::test_the_stage_labels_steps_by_monte_carlo_and_trains),
    # the quickstart notebook (test_notebooks.py::test_01_quickstart_tiny; the other notebooks'
    # runs are here), the new algorithm run of docs/algorithms.md (test_readme_example.py), the labelling
    # journal's replay on a stand-in decode (test_sample_journal.py), a user's data's sets and
    # batches (test_user_data_run.py::test_eval_sets_batches_and_reward_columns_come...), a user's
    # reward module, --import and jaxrl_llm.train (tests/rewards/test_user_rewards.py,
    # tests/workflow/test_user_imports.py), docs/extending.md's recipes imported from their
    # files with their own tests (test_extending_recipes.py's other tests), the from-SFT
    # methods' configs, budget and sweeps (test_from_sft_configs.py's other tests) and
    # each runner's and algorithm's unit tests on hand-made arrays.
    "whole runs": (
        "tests/algorithms/test_algorithms.py::test_a_new_algorithm_is_one_registration",
        "tests/benchmarks/test_time_to_accuracy.py::test_our_side_gives_a_curve",
        "tests/data/test_user_data_run.py::test_tiny_grpo_run_trains_and_evaluates_on_user",
        "tests/envs/test_episode_runner.py::test_episode_run_trains_and_resumes[multi_if_tiny]",
        "tests/envs/test_episode_runner.py::test_episodes_run_asynchronously_within_the_staleness",
        "tests/evals/test_suite.py::test_robustness_runs_end_to_end",
        "tests/evals/test_suite.py::test_sampled_metrics_agree_with_the_decoded_samples",
        "tests/roles/test_placement.py::test_colocated_and_split_grpo_give_the_same_metrics",
        "tests/runners/test_async_run.py::test_free_running_generator_respects_the_bound",
        "tests/runners/test_async_run.py::test_staleness_follows_the_schedule_and_never_exceeds",
        "tests/runners/test_async_run.py::test_zero_staleness_reproduces_the_synchronous_runner",
        "tests/runners/test_dense_process_run.py::test_ppo_with_dense_process_rewards_runs_two_steps",
        "tests/runners/test_ppo_run.py::test_critic_warmup_leaves_the_actor_untouched",
        "tests/runners/test_ppo_run.py::test_value_pretraining_then_rl_with_an_average_reference",
        "tests/stages/test_preference_runs.py::test_a_corrupt_reference_cache_is_recomputed",
        "tests/stages/test_preference_runs.py::test_offline_dpo_makes_pairs_from_the_policys",
        "tests/stages/test_preference_runs.py::test_offline_preference_learns_the_pairs",
        "tests/runners/test_online_preference_runs.py::test_online_dpo_with_an_off_policy_lag",
        "tests/stages/test_preference_runs.py::test_rest_em_fine_tunes_the_base_model",
        "tests/runners/test_online_preference_runs.py::test_rrhf_with_gold_references_runs_through",
        "tests/stages/test_process_reward_model_run.py::test_rl_with_a_process_reward_logs_it",
        "tests/stages/test_reward_model_run.py::test_pairs_are_made_from_the_policys_samples",
        "tests/stages/test_reward_model_run.py::test_rl_against_an_ensemble_of_reward_models",
        "tests/stages/test_reward_model_run.py::test_the_reward_model_learns_a_preference",
        "tests/stages/test_sample_journal.py::test_a_killed_step_labelling_resumes",
        "tests/stages/test_sft_run.py::test_sft_lowers_held_out_loss_and_writes_a_loadable",
        "tests/stages/test_sft_run.py::test_sft_resumes_where_it_stopped",
        "tests/runners/test_stabilised_runs.py::test_clip_cov_run_drops_a_share_of_the_tokens",
        "tests/runners/test_stabilised_runs.py::test_adaptive_clip_cov_share_steps_with_the",
        "tests/runners/test_stabilised_runs.py::test_dynamic_sampling_soft_overlong_and_adaptive",
        "tests/training/test_mixed_precision.py::test_twenty_adamw_steps_at_1e6_move_every",
        "tests/training/test_sft.py::test_training_lowers_the_loss_and_raises_token_accuracy",
        "tests/workflow/test_gin_bindings.py::test_gin_file_changes_the_clip_range_and_estimator",
        "tests/workflow/test_notebooks.py::test_02_grpo_tiny",
        "tests/workflow/test_notebooks.py::test_03_custom_loss",
        "tests/workflow/test_notebooks.py::test_04_multi_turn_episode",
        "tests/workflow/test_sweep_launch.py::test_two_trial_sweep_writes_a_summary_table",
        "tests/workflow/test_your_own_experiment.py::test_the_command_line_and_python_give_the",
        "tests/workflow/test_your_own_experiment.py::test_evaluate_a_users_run_and_its_held_out",
        "tests/workflow/test_readme_example.py::test_readme_own_experiment_runs",
        "tests/workflow/test_notebooks.py::test_05_your_own_task",
        "tests/workflow/test_extending_recipes.py::test_the_algorithm_recipe_trains_a_tiny_run",
        "tests/workflow/test_extending_recipes.py::test_the_environment_recipe_trains_a_tiny",
        "tests/workflow/test_extending_recipes.py::test_episodes_serve_a_registered_field_too",
        "tests/workflow/test_from_sft_configs.py::test_each_method_runs_two_steps_from_the_tiny",
    ),
    # Faults injected into whole runs: the default run keeps the corrupt checkpoint and the
    # empty step directory on GRPO (test_faults.py::...[grpo]), the reward functions that raise
    # or hang, and the file's other faults.
    "whole-run faults": (
        "tests/faults/test_faults.py::test_corrupt_newest_checkpoint_is_moved_aside_and_the_run_finishes[ppo]",
        "tests/faults/test_faults.py::test_disk_full_when_saving_stops_with_the_intact_checkpoint",
        "tests/faults/test_faults.py::test_disk_too_small_for_the_checkpoints_stops_the_run",
        "tests/faults/test_faults.py::test_empty_step_directory_is_moved_aside[grpo_async]",
        "tests/faults/test_faults.py::test_torn_last_metrics_line_is_cut_off_and_kept",
    ),
    # Two compiled forms of one computation compared (scanned / unrolled layers, cached /
    # cache-free decode, packed / unpacked rows, kernel / reference, sharded / unsharded,
    # compacted / plain engine): the default run keeps each form's own tests in the same files.
    "equivalences": (
        "tests/workflow/test_extending_recipes.py::test_the_model_family_test_runs_as_printed",
        "tests/algorithms/test_grpo.py::test_gradient_on_policy_equals_reinforce_gradient",
        "tests/algorithms/test_grpo.py::test_packed_batch_gives_the_unpacked_loss_and_gradient",
        "tests/algorithms/test_stabilisers.py::test_adaptive_entropy_weight_equals_the_constant",
        "tests/training/test_grad_accumulation.py::test_accumulated_update_equals_the_whole_batch_update[seq-mean-token-mean]",
        "tests/envs/test_episodes.py::test_episode_is_independent_of_slots_and_batch",
        "tests/envs/test_episodes.py::test_rollout_logprobs_equal_trainer_logprobs_over_episodes",
        "tests/envs/test_episodes.py::test_tool_faults_are_counted_and_do_not_stop_the_run",
        "tests/losses/test_losses_covariance.py::test_policy_loss_takes_no_gradient_from_the",
        "tests/models/test_forward_forms.py::test_decode_loop_copies_no_weight_and_no_cache",
        "tests/models/test_forward_forms.py::test_scanned_layers_equal_unrolled_in_values_and_gradients[False-none]",
        "tests/models/test_gemma3.py::test_cache_free_equals_prefill_and_decode_steps",
        "tests/models/test_gemma3.py::test_rollout_logprobs_equal_fused_teacher_forced_logprobs",
        "tests/models/test_gemma3.py::test_scanned_layers_equal_unrolled_in_values_and_gradients[none]",
        "tests/models/test_gemma3.py::test_sharded_forward_and_decode_equal_unsharded[TRAIN_RULES]",
        "tests/models/test_lora.py::test_orbax_checkpoint_holds_the_adapters_alone",
        "tests/models/test_lora.py::test_rollout_syncs_the_base_once_then_adapters_only",
        "tests/models/test_partitioning.py::test_fsdp_gathers_inside_the_layer_loop",
        "tests/models/test_transformer.py::test_cached_decode_equals_full_forward",
        "tests/models/test_transformer.py::test_remat_changes_memory_not_values_or_gradients",
        "tests/roles/test_placement.py::test_decode_batch_chunks_give_the_same_samples",
        "tests/rollout/test_compaction.py::test_common_prefix_sharing_keeps_the_completions",
        "tests/rollout/test_compaction.py::test_compaction_and_group_sharing_give_the_plain",
        "tests/rollout/test_compaction.py::test_continuous_batching_gives_the_plain_engine_results[none]",
        "tests/rollout/test_inflight.py::test_one_version_equals_the_one_program_decode[True-1]",
        "tests/rollout/test_rollout_decode_attention.py::test_greedy_tokens_identical_with_and_without_the_kernel[pallas_gpu-None]",
        "tests/rollout/test_rollout_decode_attention.py::test_greedy_tokens_identical_with_and_without_the_kernel[pallas_tpu-bfloat16]",
        "tests/rollout/test_sharded_generate.py::test_compaction_stays_on_each_data_shard",
        "tests/sharding/test_multiprocess.py::test_two_processes_form_one_mesh_and_agree",
        "tests/test_platforms.py::test_a_cpu_program_does_not_wake_libtpu",
    ),
    # The planner's and the ahead-of-time compiles of whole programs: the default run keeps
    # test_executables.py::test_a_run_executes_the_planned_train_step[plain] and the planner's
    # other tests.
    "plans and compiles": (
        "tests/sharding/test_executables.py::test_a_planned_step_of_another_model_or_a_missing_one",
        "tests/sharding/test_executables.py::test_a_run_executes_the_planned_train_step[stabilised]",
        "tests/scale/test_planner.py::test_a_split_sync_counts_each_chip_group_on_its_own",
        "tests/scale/test_planner.py::test_bad_input_is_one_line[args1-",
        "tests/scale/test_planner.py::test_bad_input_is_one_line[args2-",
        "tests/scale/test_planner.py::test_command_line_writes_the_chosen_placement",
        "tests/scale/test_planner.py::test_over_hbm_rejected_with_the_compilers_figure",
        "tests/scale/test_planner.py::test_the_weight_sync_is_compiled_with_the_plan",
    ),
}

HEAVY_PREFIXES: tuple[str, ...] = tuple(p for group in HEAVY_GROUPS.values() for p in group)


def is_heavy(nodeid: str) -> bool:
    """Whether the test `nodeid` (as pytest names it from the repository root) is listed."""
    return nodeid.startswith(HEAVY_PREFIXES)
