"""One metrics record from every torchrun process (`seqrl.training.run.reduce_rank_metrics`), as GRPO and PPO log it."""

from seqrl.training.run import reduce_rank_metrics


def test_counts_are_summed_times_and_maxima_maxed_the_rest_averaged():
    ranks = [{"perf/gen_tokens": 100.0, "reward/task/errors": 1.0, "stats/groups_kept": 3.0, "perf/gen_s": 2.0,
              "stats/completion_len_max": 40.0, "reward/task/mean": 0.5, "reward/task/first_error": "ValueError: x"},
             {"perf/gen_tokens": 60.0, "reward/task/errors": 0.0, "stats/groups_kept": 4.0, "perf/gen_s": 3.5,
              "stats/completion_len_max": 31.0, "reward/task/mean": 0.25, "reward/task/first_error": "KeyError: y"}]
    assert reduce_rank_metrics(ranks) == {
        "perf/gen_tokens": 160.0, "reward/task/errors": 1.0, "stats/groups_kept": 7.0, "perf/gen_s": 3.5,
        "stats/completion_len_max": 40.0, "reward/task/mean": 0.375, "reward/task/first_error": "ValueError: x"}
    # PPO's throughput is perf/gen_tokens / (gen_s + train_s): the tokens of every process, not one process's mean
    assert reduce_rank_metrics(ranks[:1]) is ranks[0]
