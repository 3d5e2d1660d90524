"""Rewards under adversarial model output: wall time and trainer RSS growth of one batch per class.

For each adversarial class (math-verify bombs, format-regex backtracking, nested boxes, code fences,
``ast`` bombs, spinning programs, reasoning-gym injection) a batch of completions is scored as one
`score_completions` call with the rewards `build_reward` makes (bounded: confined workers, per-call
limits); beside it, 512 ordinary completions scored by the bounded rewards and by the unbounded
functions called in this process (how rewards were called before the workers), interleaved.

    python benchmarks/reward_adversarial.py [--quick] [--n 64]

Last line of stdout: one JSON object with the headline figures. Not a test: pytest never collects it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def classes(n: int):
    from seqrl.types import Problem

    math_p = Problem("q", "5")
    code_p = Problem("q", "", metadata={"io_cases": [[[1, 2], 3]], "entry_point": "add"})
    bombs = [r"\boxed{9^{9^{9^{9}}}}", r"\boxed{(1+x)^{100000}}", r"\boxed{\binom{10^{7}}{5000000}}"]
    return {
        "math_bombs": ("math", math_p, [f"<think>t</think><answer>{bombs[i % 3]}</answer>" for i in range(n)]),
        # a lazy group across 10 000 </think><answer></answer> pairs: quadratic backtracking
        "format_backtracking_260k": ("format", math_p, ["<think>" + "</think><answer></answer>x" * 10_000
                                                        for _ in range(n)]),
        # every nested box kept (format_partial's boxed credit scans the whole completion)
        "nested_boxes_160k": ("format_partial", math_p, ["<think>t</think>" + r"\boxed{" * 11_500 + "5"
                                                         + "}" * 11_500 for _ in range(n)]),
        # opening fences with no newline: the fence regex rescans to the end from each
        "code_fences_90k": ("code", code_p, ["```" * 30_000 for _ in range(n)]),
        "ast_bomb_10mb": ("code", code_p, ["```python\n" + "x = 1\n" * 1_750_000 + "```" for _ in range(n)]),
        "spinning_programs": ("code", code_p, ["```python\ndef add(a, b):\n    while True:\n        pass\n```"
                                               for _ in range(n)]),
        "rgym_injection": ("task", None, ["<answer>__import__('os').system('touch /tmp/seqrl-bench-F')</answer>",
                                          "<answer>9**9**9</answer>"] * (n // 2)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats of the ordinary batch")
    ap.add_argument("--n", type=int, default=64, help="completions per adversarial class")
    ap.add_argument("--only", default="", help="comma-separated classes to run (default: all)")
    ap.add_argument("--code-workers", type=int, default=None, help="code reward max_workers (default: its own)")
    ap.add_argument("--budget", type=float, default=300.0, help="score_completions batch budget (s)")
    args = ap.parse_args()
    import torch

    from seqrl.data.rgym import ReasoningGymTask
    from seqrl.rewards.combine import RewardSpec, build_reward, score_completions
    from seqrl.rewards.format import format_reward
    from seqrl.rewards.math import math_answer_reward

    torch.set_num_threads(1)
    rg = ReasoningGymTask("countdown", size=8)
    rg_p = rg.problems("train", 1)[0]
    caps = torch.cpu.get_capabilities()
    caps = dict(caps) if hasattr(caps, "items") else caps
    out: dict = {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                 "cpu_flags": sorted(k for k, v in caps.items() if v is True) if isinstance(caps, dict) else str(caps)}
    fns = {name: build_reward(RewardSpec(name), rg) for name in ("math", "format", "format_partial", "code", "task")}
    if args.code_workers:
        fns["code"].max_workers = args.code_workers
    # warm the pool (started once per trainer)
    score_completions({"math": (fns["math"], 1.0)}, [rg_p], ["<answer>1</answer>"])

    # ordinary completions: bounded vs in-process
    from seqrl.types import Problem

    ordinary_p = [Problem("q", str(i % 50)) for i in range(512)]
    ordinary_c = [f"<think>{i} plus {i}</think><answer>{(i % 50) if i % 3 else i + 1}</answer>" for i in range(512)]
    bounded = {"math": (fns["math"], 1.0), "format": (fns["format"], 0.2)}
    plain = {"math": (math_answer_reward, 1.0), "format": (format_reward, 0.2)}
    times = {"bounded": [], "in_process": []}
    for _ in range(2 if args.quick else 5):
        for key, f in (("in_process", plain), ("bounded", bounded)):
            t0 = time.perf_counter()
            b = score_completions(f, ordinary_p, ordinary_c)
            times[key].append(time.perf_counter() - t0)
        assert b.total  # noqa: S101
    out["ordinary_512_s"] = {k: round(statistics.median(v), 3) for k, v in times.items()}
    out["ordinary_ratio_bounded_vs_in_process"] = round(out["ordinary_512_s"]["bounded"] / out["ordinary_512_s"]["in_process"], 3)
    print(f"ordinary 512: {out['ordinary_512_s']}", file=sys.stderr, flush=True)

    only = set(filter(None, args.only.split(",")))
    out["classes"] = {}
    for cls, (fn_name, problem, comps) in classes(args.n).items():
        if only and cls not in only:
            continue
        probs = [problem or rg_p] * len(comps)
        r0 = rss_mb()
        t0 = time.perf_counter()
        b = score_completions({fn_name: (fns[fn_name], 1.0)}, probs, comps, budget_s=args.budget)
        wall = time.perf_counter() - t0
        res = {"n": len(comps), "wall_s": round(wall, 2), "rss_growth_mb": round(rss_mb() - r0, 1),
               "timeouts": b.timeouts[fn_name], "over_budget": b.over_budget[fn_name],
               "max_score": max(b.scores[fn_name]), "reason": b.reasons[fn_name][0][:80]}
        out["classes"][cls] = res
        print(f"{cls}: {res}", file=sys.stderr, flush=True)
    out["file_created_by_injection"] = os.path.exists("/tmp/seqrl-bench-F")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
