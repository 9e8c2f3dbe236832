"""The slow tier: tests that alone take 5 s or more on this project's 2-core machine (from `scripts/test.sh
--all --durations=0`, red-team files aside: they are a tier of their own). conftest marks them `slow`; the
fast tier leaves them out. An entry is a test function or a whole file; one that no longer exists fails
tests/test_tiers.py."""

from __future__ import annotations

SLOW_TESTS: frozenset[str] = frozenset(
    {
        "tests/cli/test_seed_entry_points.py::test_the_seed_standalone_command_runs_against_a_served_model",
        "tests/fleet/test_spreading.py::test_a_frozen_node_fails_only_its_own_episodes_within_the_bound",
        "tests/fleet/test_spreading.py::test_a_killed_node_started_again_joins_as_a_new_one",
        "tests/v1/test_v1_fleet.py::test_a_node_lost_with_its_engine_costs_only_its_own_episodes",
        "tests/v1/test_v1_fleet_slurm.py::test_env_nodes_as_slurm_steps_lose_and_regain_a_node",
        "tests/rehearsal/test_rl_cpu_e2e.py::test_rl_on_the_cpu_against_559b447",
        "tests/rehearsal/test_rl_cpu_e2e.py::test_rl_on_the_cpu_against_c87c19b",
        "tests/rehearsal/test_rl_signal.py",  # a run of prime-rl's trainer per test: 15-30 s
        "tests/cli/test_rl_command.py::test_a_typod_key_is_prime_rls_own_message_and_leaves_nothing",  # prime-rl's rl
        "tests/serving/test_prime_rl_vllm.py::test_prime_rl_serves_smollm2_and_loads_an_adapter_by_its_route",
        "tests/runs/test_standalone_vllm.py::test_smollm2_plays_through_prime_rls_vllm",
        "tests/fleet/test_gate_security.py::test_only_the_runs_key_gets_past_a_nodes_gate",
        "tests/env/test_host_logging.py::test_a_real_classic_vf_eval_run_logs_the_quota_warning_in_its_eval_log",
        "tests/env/test_mlgym_env.py::test_a_killed_container_masks_only_its_rollout",
        "tests/env/test_mlgym_env.py::test_eight_concurrent_rollouts_improve_and_are_recorded",
        "tests/env/test_mlgym_env.py::test_prime_rl_env_group_routes_by_info_and_names_metrics_per_task",
        "tests/env/test_mlgym_env.py::test_vf_eval_against_the_scripted_server_saves_results",
        "tests/env/test_time_limits.py::test_a_comment_does_not_buy_the_training_timeout",
        "tests/env/test_time_limits.py::test_the_rollout_time_limit_cuts_a_command_and_ends_the_episode",
        "tests/fleet/test_slurm_cluster.py",  # each test pays for a cluster's start and stop (5 s and more)
        "tests/fleet/test_network_cut.py",  # each waits out a loss and a heal (6-27 s)
        "tests/fleet/test_spreader_death.py",  # each waits for a death, a restart and the nodes' cancel
        "tests/fleet/test_spreading.py::test_a_node_whose_env_server_stops_answering_is_sick_then_lost_and_back",
        "tests/fleet/test_node_restart.py::test_a_step_killed_by_hand_under_slurm_restarts_without_its_orphan",
        "tests/v1/test_v1_fleet_faults.py",  # laneMerge in containers, a second engine
        "tests/serving/test_policy_server.py::test_an_idle_connection_outlives_the_clients_pool_expiry",
        # The session's SmolLM2 (download and conversion, 25 s) is paid by whichever of these runs first.
        "tests/serving/test_smollm2_serving.py",  # the real model on the CPU: about 2 min
        "tests/v1/test_v1_smollm2.py",  # v1 vf-eval's episodes in containers, sampled by the real model
        "tests/serving/test_smollm2_prepare.py::test_a_damaged_file_is_found_and_the_folder_rewritten",
        "tests/serving/test_smollm2_prepare.py::test_a_second_prepare_reuses_the_folder_without_the_index",
        "tests/serving/test_smollm2_prepare.py::test_an_installed_package_then_the_cached_wheel_are_found_without_the_index",
        "tests/serving/test_smollm2_prepare.py::test_the_command_prints_the_folder_its_time_its_disk_and_what_to_run",
        "tests/serving/test_smollm2_prepare.py::test_the_folder_loads_with_plain_transformers_as_the_instruct_model",
        "tests/serving/test_smollm2_prepare.py::test_the_manifest_records_the_source_and_every_file",
        "tests/packaging/test_wheel_install.py::test_classic_vf_eval_runs_air_mlgym_from_the_installed_wheel",
        "tests/packaging/test_wheel_install.py::test_v1_vf_eval_runs_air_mlgym_from_the_installed_wheel",
        "tests/runs/test_demo.py::test_every_task_gets_one_status",
        "tests/runs/test_demo.py::test_lane_merge_is_judged_as_a_sampled_game",
        "tests/runs/test_interrupted_run.py::test_ctrl_c_before_any_rollout_ended_leaves_no_folder",
        "tests/runs/test_interrupted_run.py::test_ctrl_c_in_a_step_leaves_only_true_files",
        "tests/runs/test_model_endpoint_faults.py::test_a_hung_endpoint_fails_in_twice_the_model_timeout",
        "tests/runs/test_replay.py::test_a_group_shares_one_seed_and_replay_reproduces_it_exactly",
        "tests/runs/test_replay_sigterm.py",  # a real replay stopped mid-rollout: 7 s
        "tests/runs/test_standalone_cli.py::test_an_endpoint_dead_after_the_start_names_its_cause_and_writes_no_nan",
        "tests/runs/test_standalone_cli.py::test_trajectories_carry_their_step_and_advantage",
        "tests/runs/test_standalone_cli.py::test_two_runs_started_together_keep_separate_complete_folders",
        "tests/runs/test_standalone_engine_restart.py::test_an_engine_restart_masks_at_most_one_step_and_leaves_nothing",
        "tests/runs/test_standalone_engine_restart.py::test_an_engine_that_does_not_come_back_stops_the_run_and_the_next_run_reaps",
        "tests/runs/test_standalone_replay.py::test_air_standalone_runs_steps_on_a_builtin_task",
        "tests/runs/test_standalone_replay.py::test_replaying_an_mlgym_run_on_its_task_root",
        "tests/runs/test_standalone_replay.py::test_replaying_our_trajectory_reproduces_its_scores",
        "tests/runs/test_standalone_seed.py::test_two_runs_of_one_seed_give_the_same_figures",
        # The engine slowed on purpose: 13 paced passes a turn; a first forward pass of 45 s of torch work.
        "tests/runs/test_slow_model.py::test_a_local_model_slower_than_the_model_timeout_still_plays",
        "tests/runs/test_slow_model.py::test_the_process_exits_cleanly_after_a_run_with_the_local_model",
        "tests/runs/test_standalone_start_checks.py::test_an_argument_error_comes_before_the_heavy_imports",
        "tests/sandbox/test_disk_blinding.py::test_empty_folders_count_and_a_big_file_after_them_is_seen",
        "tests/sandbox/test_disk_limits.py::test_a_runaway_file_hits_the_quota_and_the_rollout_goes_on",
        "tests/sandbox/test_disk_quota.py",  # second engines on btrfs and xfs files, engine_quota.sh
        "tests/sandbox/test_engine_restart.py::test_a_lost_engine_costs_only_the_rollouts_it_was_running",
        "tests/sandbox/test_engine_restart.py::test_an_engine_that_stays_away_stops_new_rollouts_after_the_wait",
        "tests/sandbox/test_engine_restart.py::test_containers_a_quick_restart_stopped_are_never_handed_out",
        "tests/sandbox/test_interrupt_during_warmup.py::test_ctrl_c_while_containers_start_is_one_line_and_leaves_nothing",
        "tests/sandbox/test_sandbox.py::test_32_sessions_from_one_event_loop",
        "tests/sandbox/test_rollout_isolation.py::test_a_named_process_is_listed_once_started_even_in_a_busy_container",
        "tests/tasks/test_evaluation_budget.py::test_a_slow_strategy_runs_out_of_the_evaluation_budget",
        "tests/tasks/test_evaluation_seed.py::test_lane_merge_draws_its_opponent_from_the_evaluation_seed",
        "tests/tasks/test_mlgym_image.py::test_no_start_up_hook_of_the_agent_runs_in_the_evaluation",
        "tests/tasks/test_mlgym_image.py::test_the_hooks_do_run_where_the_check_is_bypassed",
        "tests/tasks/test_mlgym_image.py::test_the_prepared_image_scores_what_ours_scores",
        "tests/tasks/test_task_runtime.py::test_evaluation_outcomes",
        "tests/test_readme_quickstart.py::test_the_screenshot_script_runs_a_real_run_and_saves_a_png",
        "tests/test_tiers.py::test_the_fast_tier_is_the_full_one_less_slow_and_red_team_tests",
        "tests/launch/test_install_prime_rl.py",  # a module-scoped install the first test pays for
        "tests/launch/test_v1_configs.py::test_air_check_names_a_config_for_the_other_prime_rl",
        "tests/v1/test_v1_engine_restart.py::test_an_engine_restart_fails_only_the_episode_it_was_running",
        "tests/v1/test_v1_front.py::test_max_turns_plays_the_last_reply_and_evaluates",
        "tests/v1/test_v1_front.py::test_vf_eval_scores_air_mlgym_rollouts",
        "tests/v1/test_v1_front.py::test_vf_eval_seats_the_null_harness_when_asked",
        "tests/v1/test_v1_hints.py::test_the_policy_server_banner_suggests_vf_eval_0_4_and_it_takes_it",
        "tests/v1/test_v1_host_logging.py::test_a_real_vf_eval_run_logs_the_quota_warning",
        "tests/v1/test_v1_player.py::test_a_hung_model_call_fails_within_the_model_timeout",
        "tests/viewer/test_learning_browser.py",  # two viewers in Chromium, 6 s each
        "tests/viewer/test_viewer_browser.py::test_open_select_a_rollout_step_through_it_and_compare",
        "tests/viewer/test_viewer_browser.py::test_the_reward_chart_shows_every_run_in_its_legend",
        "tests/viewer/test_viewer_plain_text.py::test_the_agents_text_shows_as_text_in_titles_errors_and_compare",
        "tests/viewer/test_visualize.py::test_air_view_without_streamlit_says_how_to_get_it",
    }
)
