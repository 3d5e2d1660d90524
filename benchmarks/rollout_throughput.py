#!/usr/bin/env python
"""Rollout throughput: `seqrl.rollout.generate` against Hugging Face `model.generate`.

    python benchmarks/rollout_throughput.py --quick      # ≈ 3 min with an empty cache
    python benchmarks/rollout_throughput.py              # full run, ≈ 10 min

    python benchmarks/rollout_throughput.py --presets smollm2 --prompts 4 --max-new-tokens 96 --repeats 3

Both engines get the same model weights, the same prompts (distinct 2-digit additions from the
arithmetic test split; for smollm2, the real instruct model, GSM-style word problems in its chat template), the same batch (P prompts × n samples), the same sampling settings
(temperature 1.0, no top-k, top-p 1.0), the same `max_new_tokens`, fp32 and one torch thread.
Hugging Face gets the P prompts with ``num_return_sequences=n``.

Two modes per preset (tiny, small, smollm2):

* natural — rows stop at EOS. A model fresh from initialisation almost never emits EOS, so each
  preset is first trained briefly with SFT on 2-digit addition (cached under
  ``runs/bench-cache/<preset>-<steps>/``; ``--retrain`` redoes it). The fraction of rows that
  stopped at EOS and the mean / max generated lengths are reported for both engines.
* forced — every row generates exactly `max_new_tokens`: ours with ``ignore_eos=True``, Hugging Face
  with ``eos_token_id=None`` (no EOS check at all; the sampling distribution is untouched, unlike
  ``min_new_tokens`` which masks the EOS logit). Both are checked to give exactly
  `max_new_tokens` tokens per row.

Three engines (five with bf16): seqrl with its default lean decode path (`seqrl.rollout.lean`: static KV cache, fused
projections), seqrl with the HF forward (``SamplingParams(decode="hf")``, the same sampling loop over
the HF model and a `DynamicCache`), and HF `generate`; where the CPU has AVX-512 BF16 or AMX-BF16
(``--bf16 auto``, the default), also seqrl lean under ``torch.autocast(bf16)`` (projections and head
in bf16, weights cast once per call; a bf16 KV cache, `lean.KV_BF16`; ``--kv-bf16 off``: fp32) and HF `generate` under the same
autocast (as TRL's ``bf16=True`` generates; the equal-precision anchor, ``bf16_vs_hf_bf16_*``; its speedup
column is against that). bf16 samples other tokens than
fp32, so in natural mode its lengths differ: compare its seconds per call *and* tokens/s. With
``--unpacked``, one more: seqrl lean with `F.linear` on the plain weights (``lean.PACK_WEIGHTS = False``)
instead of oneDNN on weights packed once per call, the packing's share (``lean_packed_vs_unpacked_*``).

For each (preset, mode): one warm-up call per engine (same batch, at most 16 new tokens: the same
code paths at a fraction of the cost), then R repeats interleaved (lean, seqrl-HF-forward, HF, …).
Generated tokens count real tokens only, up to and including the first EOS (for HF found in its
padded output). Reported: median seconds, median tokens/s, and speedup = HF median seconds / ours
median seconds (> 1: ours is faster); the decode work in rows × steps of each engine (HF keeps every
row until the last one stops); for ours, `decode_rows_x_steps / padded_rows_x_steps`, the fraction
of its own padded decode work actually done. A greedy parity check (ours vs HF, token for token)
runs once per preset.

The machine is small, shared and noisy: times move between runs; ratios of interleaved runs hold
better. The last printed line is one JSON object with the headline figures (``speedup_vs_hf_*``: lean
vs HF generate), the CPU model, torch's CPU capabilities (avx512_bf16, amx_bf16) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # runnable from a checkout without installing the package
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from seqrl.algos.config import TaskConfig  # noqa: E402

from seqrl.algos.config import OptimConfig, RunConfig
from seqrl.algos.sft import SFTConfig  # noqa: E402
from seqrl.evaluation import EvalConfig  # noqa: E402
from seqrl.data import get_task  # noqa: E402
from seqrl.models import ModelConfig, Policy, load_pretrained, num_parameters  # noqa: E402
from seqrl.rollout import SamplingParams, generate  # noqa: E402
from seqrl.utils.progress import progress_bar  # noqa: E402

from _warm_start import cached_sft  # noqa: E402  (benchmarks/, the script's own folder)
from _machine import machine_info  # noqa: E402 — benchmarks/, the script's own folder

PRESETS = ("tiny", "small", "smollm2")
"""smollm2: SmolLM2-135M-Instruct as shipped (`seqrl models get smollm2-135m-instruct`; no SFT), prompted
with GSM-style word problems in its chat template, so its rows stop where an instruct model stops."""
MODES = ("natural", "forced")
# SFT that is just enough for the model to write the answer format and stop at EOS (accuracy is
# beside the point). fp32: on this AVX2-only CPU bf16 autocast made a small-preset step ≈ 12× slower.
DEFAULT_STEPS = {"tiny": 100, "small": 30}
TRAIN_LR = 3e-3
TRAIN_BATCH = 32
MAX_SEQ_LEN = 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repeats (≈ 3 min including training)")
    p.add_argument("--presets", default="tiny,small", help="comma-separated presets (tiny, small, smollm2: the real model, fetched once)")
    p.add_argument("--modes", default="natural,forced", help="comma-separated modes (natural, forced)")
    p.add_argument("--prompts", type=int, default=16, help="distinct prompts P")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per engine (default 3 quick, 9 full)")
    p.add_argument("--forced-repeats", type=int, default=None,
                   help="timed repeats in forced mode (default: --repeats; 2 with --quick, its calls are the longest)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the prompt draw and of sampling (training uses seed 0)")
    p.add_argument("--tiny-steps", type=int, default=DEFAULT_STEPS["tiny"], help="SFT steps of the tiny preset")
    p.add_argument("--small-steps", type=int, default=DEFAULT_STEPS["small"], help="SFT steps of the small preset")
    p.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                   help="a fourth engine, seqrl lean under bf16 autocast (projections in bf16); auto: where the CPU "
                        "has AVX-512 BF16 or AMX-BF16")
    p.add_argument("--kv-bf16", choices=("on", "off"), default="on",
                   help="the bf16 engine's KV cache in bf16 (`seqrl.rollout.lean.KV_BF16`, the default) or fp32")
    p.add_argument("--unpacked", action="store_true",
                   help="one more engine: seqrl lean with F.linear on unpacked weights (the oneDNN packing's share)")
    p.add_argument("--cache-dir", default=str(ROOT / "runs" / "bench-cache"), help="trained checkpoints")
    p.add_argument("--retrain", action="store_true", help="train again even when a cached checkpoint exists")
    args = p.parse_args(argv)
    args.presets = [x for x in args.presets.split(",") if x]
    args.modes = [x for x in args.modes.split(",") if x]
    for x in args.presets:
        if x not in PRESETS:
            p.error(f"unknown preset {x!r}; choose from {PRESETS}")
    for x in args.modes:
        if x not in MODES:
            p.error(f"unknown mode {x!r}; choose from {MODES}")
    if args.repeats is None:
        args.repeats = 3 if args.quick else 9
    if args.forced_repeats is None:
        args.forced_repeats = min(2, args.repeats) if args.quick else args.repeats
    if min(args.prompts, args.n, args.max_new_tokens, args.repeats, args.forced_repeats, args.threads) < 1:
        p.error("--prompts, --n, --max-new-tokens, --repeats, --forced-repeats and --threads must be >= 1")
    return args


# ---------------------------------------------------------------------------------------------
# Trained checkpoints (cached)


def trained_policy(preset: str, steps: int, args: argparse.Namespace) -> tuple[Policy, dict]:
    """The preset after `steps` of SFT on 2-digit addition, from the cache or trained now; smollm2 as shipped."""
    if preset == "smollm2":
        from seqrl.models.catalog import fetch

        policy = load_pretrained(fetch("smollm2-135m-instruct"))
        policy.model.eval()
        torch.set_num_threads(args.threads)
        return policy, {"cached": True, "steps": 0, "train_s": 0.0, "parameters": num_parameters(policy.model)}
    run_dir = Path(args.cache_dir) / f"{preset}-{steps}"

    def config() -> SFTConfig:
        return SFTConfig(
            run=RunConfig(name=run_dir.name, out_dir=str(run_dir.parent), seed=0, threads=args.threads,
                          bf16=False, save_every=0, keep_last=1, log_every=max(1, steps // 5)),
            model=ModelConfig(preset=preset, max_seq_len=MAX_SEQ_LEN),
            task=TaskConfig(name="arith", kwargs={"digits": 2}, n_train=5000, n_test=64),
            optim=OptimConfig(lr=TRAIN_LR, warmup_steps=min(50, steps // 4)),
            eval=EvalConfig(every=0, max_new_tokens=48),
            steps=steps,
            batch_size=TRAIN_BATCH,
        )

    info = {**cached_sft(run_dir, steps, config, args.retrain), "steps": steps}
    ckpt = info["checkpoint"]
    torch.set_num_threads(args.threads)  # train() sets it too; keep ours in force either way
    policy = load_pretrained(ckpt)
    policy.model.eval()
    info["parameters"] = num_parameters(policy.model)
    return policy, info


# ---------------------------------------------------------------------------------------------
# One timed call of each engine


def eos_ids(policy: Policy) -> list[int]:
    ids: set[int] = set()
    for source in (policy.model.generation_config.eos_token_id, policy.tokenizer.eos_token_id):
        if source is not None:
            ids.update(source if isinstance(source, (list, tuple)) else [source])
    return sorted(ids)


def run_ours(policy: Policy, prompt_ids: list[list[int]], n: int, max_new: int, forced: bool, seed: int,
             decode: str = "auto", bf16: bool = False, unpacked: bool = False) -> dict:
    from seqrl.rollout import lean

    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new, seed=seed,
                            ignore_eos=forced, decode=decode)
    before, lean.PACK_WEIGHTS = lean.PACK_WEIGHTS, (False if unpacked else lean.PACK_WEIGHTS)
    try:
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            ro = generate(policy, prompt_ids, n, params)
        seconds = time.perf_counter() - t0
    finally:
        lean.PACK_WEIGHTS = before
    lengths = ro.lengths
    if forced and not bool((lengths == max_new).all()):
        raise RuntimeError(f"ours, forced: lengths {lengths.unique().tolist()} != {max_new}")
    eos = torch.tensor(eos_ids(policy))
    # A row stopped naturally when its last real token is EOS.
    last = ro.completion_ids.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
    stopped = (torch.isin(last, eos) & (lengths > 0)) if not forced else torch.zeros_like(lengths, dtype=torch.bool)
    if (ro.stats["lean_decode"] == 1.0) != (decode != "hf"):
        raise RuntimeError(f"ours, decode={decode!r}: the engine ran lean_decode={ro.stats['lean_decode']}")
    return {
        "seconds": seconds,
        "tokens": int(lengths.sum()),
        "lengths": lengths,
        "stopped": stopped,
        "work_frac": ro.stats["decode_rows_x_steps"] / max(1.0, ro.stats["padded_rows_x_steps"]),
        "rows_x_steps": int(ro.stats["decode_rows_x_steps"]),
    }


def hf_inputs(policy: Policy, prompt_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (P, L) ids and attention mask."""
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


@torch.no_grad()
def run_hf(policy: Policy, inputs: tuple[torch.Tensor, torch.Tensor], n: int, max_new: int, forced: bool,
           seed: int, bf16: bool = False) -> dict:
    ids, mask = inputs
    eos = eos_ids(policy)
    pad = policy.tokenizer.pad_token_id if policy.tokenizer.pad_token_id is not None else 0
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # as TRL's bf16=True generates
        out = policy.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
            max_new_tokens=max_new, num_return_sequences=n, pad_token_id=pad,
            eos_token_id=None if forced else eos,
        )
    seconds = time.perf_counter() - t0
    comp = out[:, ids.shape[1]:]  # (N, T)
    is_eos = torch.isin(comp, torch.tensor(eos))
    if forced:
        if comp.shape[1] != max_new:
            raise RuntimeError(f"HF, forced: generated {comp.shape[1]} tokens per row, not {max_new}")
        lengths = torch.full((comp.shape[0],), max_new, dtype=torch.long)
        stopped = torch.zeros_like(lengths, dtype=torch.bool)
    else:
        stopped = is_eos.any(1)
        first = is_eos.float().argmax(1) + 1  # index of the first EOS, + 1 to include it
        lengths = torch.where(stopped, first, torch.full_like(first, comp.shape[1]))
    # HF runs every row through every step until the last row stops.
    return {"seconds": seconds, "tokens": int(lengths.sum()), "lengths": lengths, "stopped": stopped,
            "rows_x_steps": int(comp.shape[0] * comp.shape[1])}


@torch.no_grad()
def greedy_parity(policy: Policy, prompt_ids: list[list[int]], max_new: int) -> bool:
    """Greedy ours == greedy HF token for token (up to and including EOS) on every prompt."""
    ro = generate(policy, prompt_ids, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new))
    ids, mask = hf_inputs(policy, prompt_ids)
    out = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                                pad_token_id=policy.tokenizer.pad_token_id, eos_token_id=eos_ids(policy))
    comp = out[:, ids.shape[1]:]
    eos = torch.tensor(eos_ids(policy))
    for i, length in enumerate(ro.lengths.tolist()):
        row = comp[i].tolist()
        hits = [j for j, t in enumerate(row) if t in eos.tolist()]
        hf_len = hits[0] + 1 if hits else len(row)
        if hf_len != length or row[:hf_len] != ro.completion_ids[i, :length].tolist():
            return False
    return True


# ---------------------------------------------------------------------------------------------
# The benchmark


def summarize(calls: list[dict], rows: int) -> dict:
    lengths = torch.cat([c["lengths"] for c in calls]).float()
    stopped = torch.cat([c["stopped"] for c in calls]).float()
    out = {
        "median_s": statistics.median(c["seconds"] for c in calls),
        "seconds": [round(c["seconds"], 4) for c in calls],
        "median_tokens": statistics.median_low(c["tokens"] for c in calls),
        "tokens": [c["tokens"] for c in calls],
        "tok_s": statistics.median(c["tokens"] / c["seconds"] for c in calls),
        "stop_frac": float(stopped.mean()),
        "mean_len": float(lengths.mean()),
        "max_len": int(lengths.max()),
        "rows": rows,
        "rows_x_steps": statistics.median_low(c["rows_x_steps"] for c in calls),
    }
    if "work_frac" in calls[0]:
        out["decode_work_frac"] = statistics.median(c["work_frac"] for c in calls)
    return out


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    console = Console(width=None if sys.stdout.isatty() else 150)
    steps = {"tiny": args.tiny_steps, "small": args.small_steps, "smollm2": 0}
    questions_of = {}
    for task in ("arith", "gsm"):
        problems = get_task(task, **({"digits": 2} if task == "arith" else {})).problems("test", args.prompts, args.seed)
        questions_of[task] = [p.prompt for p in problems]
        if len(set(questions_of[task])) != len(questions_of[task]):
            raise RuntimeError("prompts are not distinct")
    rows = args.prompts * args.n
    from seqrl.utils.dist import bf16_fast

    bf16 = args.bf16 == "on" or (args.bf16 == "auto" and bf16_fast(torch.device("cpu")))
    from seqrl.rollout import lean

    lean.KV_BF16 = args.kv_bf16 == "on"
    engines = 3 + 2 * bf16 + args.unpacked
    results: dict[str, dict] = {}
    train_info: dict[str, dict] = {}
    parity: dict[str, bool] = {}

    for preset in args.presets:
        policy, info = trained_policy(preset, steps[preset], args)
        train_info[preset] = info
        prompt_ids = policy.encode_prompts(questions_of["gsm" if preset == "smollm2" else "arith"])
        inputs = hf_inputs(policy, prompt_ids)
        parity[preset] = greedy_parity(policy, prompt_ids, args.max_new_tokens)
        repeats = {"natural": args.repeats, "forced": args.forced_repeats}
        with progress_bar(sum(engines * (repeats[m] + 1) for m in args.modes), f"{preset}: ours vs HF") as bar:
            for mode in args.modes:
                forced = mode == "forced"
                ours, ours_hf, hf, ours_bf16, hf_bf16, ours_unpacked = [], [], [], [], [], []
                # Warm-up (not timed): the same batch, shorter (it runs the same code paths), then
                # interleaved repeats.
                warm = min(args.max_new_tokens, 16)
                run_ours(policy, prompt_ids, args.n, warm, forced, seed=10_000)
                bar.advance(1, mode=mode)
                run_ours(policy, prompt_ids, args.n, warm, forced, seed=10_000, decode="hf")
                bar.advance(1)
                run_hf(policy, inputs, args.n, warm, forced, seed=10_000)
                bar.advance(1)
                if bf16:
                    run_ours(policy, prompt_ids, args.n, warm, forced, seed=10_000, bf16=True)
                    run_hf(policy, inputs, args.n, warm, forced, seed=10_000, bf16=True)
                    bar.advance(2)
                if args.unpacked:
                    run_ours(policy, prompt_ids, args.n, warm, forced, seed=10_000, unpacked=True)
                    bar.advance(1)
                for r in range(repeats[mode]):
                    seed = args.seed * 1000 + r
                    ours.append(run_ours(policy, prompt_ids, args.n, args.max_new_tokens, forced, seed))
                    bar.advance(1, ours_s=ours[-1]["seconds"])
                    ours_hf.append(run_ours(policy, prompt_ids, args.n, args.max_new_tokens, forced, seed,
                                            decode="hf"))
                    bar.advance(1, ours_hf_s=ours_hf[-1]["seconds"])
                    hf.append(run_hf(policy, inputs, args.n, args.max_new_tokens, forced, seed))
                    bar.advance(1, hf_s=hf[-1]["seconds"])
                    if bf16:
                        ours_bf16.append(run_ours(policy, prompt_ids, args.n, args.max_new_tokens, forced, seed,
                                                  bf16=True))
                        bar.advance(1, bf16_s=ours_bf16[-1]["seconds"])
                        hf_bf16.append(run_hf(policy, inputs, args.n, args.max_new_tokens, forced, seed, bf16=True))
                        bar.advance(1, hf_bf16_s=hf_bf16[-1]["seconds"])
                    if args.unpacked:
                        ours_unpacked.append(run_ours(policy, prompt_ids, args.n, args.max_new_tokens, forced, seed,
                                                      unpacked=True))
                        bar.advance(1, unpacked_s=ours_unpacked[-1]["seconds"])
                o, oh, h = summarize(ours, rows), summarize(ours_hf, rows), summarize(hf, rows)
                results[f"{preset}_{mode}"] = {
                    "preset": preset, "mode": mode, "ours": o, "ours_hf": oh, "hf": h,
                    "speedup": h["median_s"] / o["median_s"], "speedup_hf_forward": h["median_s"] / oh["median_s"],
                    "lean_vs_hf_forward": oh["median_s"] / o["median_s"], "repeats": repeats[mode],
                    "tok_s_ratio": o["tok_s"] / h["tok_s"],
                }
                if bf16:  # seconds per call and per token: bf16 samples other tokens (natural lengths differ)
                    ob, hb = summarize(ours_bf16, rows), summarize(hf_bf16, rows)
                    results[f"{preset}_{mode}"].update(
                        ours_bf16=ob, hf_bf16=hb, speedup_bf16=h["median_s"] / ob["median_s"],
                        speedup_bf16_vs_hf_bf16=hb["median_s"] / ob["median_s"],
                        speedup_bf16_vs_hf_bf16_tok_s=ob["tok_s"] / hb["tok_s"],
                        lean_bf16_vs_fp32=o["median_s"] / ob["median_s"],
                        lean_bf16_vs_fp32_tok_s=ob["tok_s"] / o["tok_s"])
                if args.unpacked:  # the same tokens as packed up to fp32 rounding: seconds and tokens/s
                    ou = summarize(ours_unpacked, rows)
                    results[f"{preset}_{mode}"].update(
                        ours_unpacked=ou, speedup_unpacked=h["median_s"] / ou["median_s"],
                        lean_packed_vs_unpacked=ou["median_s"] / o["median_s"],
                        lean_packed_vs_unpacked_tok_s=o["tok_s"] / ou["tok_s"])
        del policy

    # ---- readable table (stdout) ----
    table = Table(title=f"Rollout throughput: {args.prompts} prompts × {args.n} samples = {rows} rows, "
                        f"max_new_tokens {args.max_new_tokens}, T=1.0, fp32, {args.threads} thread(s), "
                        f"{args.repeats} repeats (forced: {args.forced_repeats})")
    for col in ("preset", "mode", "engine", "median s", "tokens/call", "tokens/s", "stopped at EOS",
                "mean len", "max len", "rows×steps", "decode work", "speedup"):
        table.add_column(col, justify="right" if col not in ("preset", "mode", "engine") else "left")
    for key, res in results.items():
        for engine in ("ours", "ours_hf", "hf", "ours_bf16", "hf_bf16", "ours_unpacked"):
            if engine not in res:
                continue
            s = res[engine]
            speedup = {"ours": res["speedup"], "ours_hf": res["speedup_hf_forward"],
                       "ours_bf16": res.get("speedup_bf16_vs_hf_bf16"),
                       "ours_unpacked": res.get("speedup_unpacked")}.get(engine)
            table.add_row(
                res["preset"] if engine == "ours" else "", res["mode"] if engine == "ours" else "",
                {"ours": "seqrl lean", "ours_hf": "seqrl HF forward", "hf": "HF generate",
                 "ours_bf16": "seqrl lean bf16", "hf_bf16": "HF generate bf16",
                 "ours_unpacked": "seqrl lean, F.linear"}[engine],
                f"{s['median_s']:.3f}", f"{s['median_tokens']:.0f}", f"{s['tok_s']:.0f}",
                f"{s['stop_frac']:.1%}" if res["mode"] == "natural" else "forced",
                f"{s['mean_len']:.1f}", f"{s['max_len']}", f"{s['rows_x_steps']:.0f}",
                f"{s['decode_work_frac']:.1%}" if "decode_work_frac" in s else "",
                f"{speedup:.2f}×" if speedup is not None else "",
            )
    console.print(table)
    console.print("speedup = HF median s / seqrl median s (> 1: seqrl faster); rows×steps: decode work (HF keeps "
                  "every row until the last stops); decode work: seqrl's decode_rows_x_steps / padded_rows_x_steps")
    for preset, info in train_info.items():
        how = ("as shipped" if preset == "smollm2" else "cached") if info["cached"] else f"trained now in {info['train_s']} s"
        console.print(f"{preset}: {info['parameters'] / 1e6:.2f}M params, SFT {info['steps']} steps ({how}), "
                      f"greedy accuracy {info.get('greedy_accuracy', float('nan')):.2f}, "
                      f"greedy ours == HF: {parity[preset]}")

    summary: dict = {"benchmark": "rollout_throughput", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                     "quick": args.quick, "kv_bf16": args.kv_bf16 == "on", "rows": rows, "prompts": args.prompts, "n": args.n,
                     "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                     "forced_repeats": args.forced_repeats, "threads": args.threads}
    for key, res in results.items():
        suffix = res["preset"] + ("_forced" if res["mode"] == "forced" else "")
        summary[f"speedup_vs_hf_{suffix}"] = round(res["speedup"], 3)
    for key, res in results.items():
        suffix = res["preset"] + ("_forced" if res["mode"] == "forced" else "")
        summary[f"speedup_hf_forward_vs_hf_{suffix}"] = round(res["speedup_hf_forward"], 3)
        summary[f"lean_vs_hf_forward_{suffix}"] = round(res["lean_vs_hf_forward"], 3)
        if "ours_bf16" in res:
            summary[f"speedup_vs_hf_bf16_{suffix}"] = round(res["speedup_bf16"], 3)  # lean bf16 vs HF fp32
            summary[f"bf16_vs_hf_bf16_{suffix}"] = round(res["speedup_bf16_vs_hf_bf16"], 3)  # both bf16
            summary[f"bf16_vs_hf_bf16_tok_s_{suffix}"] = round(res["speedup_bf16_vs_hf_bf16_tok_s"], 3)
            summary[f"lean_bf16_vs_fp32_{suffix}"] = round(res["lean_bf16_vs_fp32"], 3)
            summary[f"lean_bf16_vs_fp32_tok_s_{suffix}"] = round(res["lean_bf16_vs_fp32_tok_s"], 3)
            summary[f"ours_bf16_median_s_{suffix}"] = round(res["ours_bf16"]["median_s"], 4)
        if "ours_unpacked" in res:
            summary[f"lean_packed_vs_unpacked_{suffix}"] = round(res["lean_packed_vs_unpacked"], 3)
            summary[f"lean_packed_vs_unpacked_tok_s_{suffix}"] = round(res["lean_packed_vs_unpacked_tok_s"], 3)
            summary[f"speedup_vs_hf_unpacked_{suffix}"] = round(res["speedup_unpacked"], 3)
    for key, res in results.items():
        suffix = res["preset"] + ("_forced" if res["mode"] == "forced" else "")
        o, h = res["ours"], res["hf"]
        summary[f"ours_median_s_{suffix}"] = round(o["median_s"], 4)
        summary[f"hf_median_s_{suffix}"] = round(h["median_s"], 4)
        summary[f"ours_hf_forward_median_s_{suffix}"] = round(res["ours_hf"]["median_s"], 4)
        summary[f"ours_tokens_{suffix}"] = o["median_tokens"]
        summary[f"hf_tokens_{suffix}"] = h["median_tokens"]
        summary[f"ours_tok_s_{suffix}"] = round(o["tok_s"], 1)
        summary[f"hf_tok_s_{suffix}"] = round(h["tok_s"], 1)
        summary[f"tok_s_ratio_{suffix}"] = round(res["tok_s_ratio"], 3)
        summary[f"ours_decode_work_frac_{suffix}"] = round(o["decode_work_frac"], 3)
        summary[f"ours_rows_x_steps_{suffix}"] = o["rows_x_steps"]
        summary[f"hf_rows_x_steps_{suffix}"] = h["rows_x_steps"]
        if res["mode"] == "natural":
            summary[f"ours_stop_frac_{suffix}"] = round(o["stop_frac"], 3)
            summary[f"hf_stop_frac_{suffix}"] = round(h["stop_frac"], 3)
            summary[f"ours_mean_len_{suffix}"] = round(o["mean_len"], 2)
            summary[f"hf_mean_len_{suffix}"] = round(h["mean_len"], 2)
            summary[f"ours_max_len_{suffix}"] = o["max_len"]
            summary[f"hf_max_len_{suffix}"] = h["max_len"]
    for preset, info in train_info.items():
        summary[f"sft_steps_{preset}"] = info["steps"]
        summary[f"train_s_{preset}"] = info.get("train_s", 0.0)
        summary[f"greedy_parity_{preset}"] = parity[preset]
    summary.update(machine_info())
    summary["load_avg_start_1_5_15"] = load_start
    summary["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
